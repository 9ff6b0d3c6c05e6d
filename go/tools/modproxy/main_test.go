package main

import (
	"archive/zip"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// moduleDir writes a module of path into a directory of its own, with a module of its own nested.
func moduleDir(t *testing.T, path string) string {
	t.Helper()
	dir := t.TempDir()
	for name, text := range map[string]string{
		"go.mod":           "module " + path + "\n\ngo 1.26\n",
		"m.go":             "package m\n",
		"inner/inner.go":   "package inner\n",
		"nested/go.mod":    "module " + path + "/nested\n",
		"nested/nested.go": "package nested\n",
	} {
		name = filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func read(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestWritesTheProxyLayout(t *testing.T) {
	dir, out := moduleDir(t, "example.com/Upper"), t.TempDir()
	pseudo := "v0.0.2-0.20260826112438-691b2c90c5bb"
	args := []string{"-time", "2026-01-02T03:04:05Z", "-o", out,
		"example.com/Upper@v1.10.0=" + dir, "example.com/Upper@v1.2.3=" + dir,
		"example.com/Upper@" + pseudo + "=" + dir}
	if err := run(args, io.Discard); err != nil {
		t.Fatal(err)
	}
	at := filepath.Join(out, "example.com", "!upper", "@v")
	// Semantic version order; a pseudo-version is not listed.
	if got := read(t, filepath.Join(at, "list")); got != "v1.2.3\nv1.10.0\n" {
		t.Errorf("list = %q", got)
	}
	if got := read(t, filepath.Join(at, "v1.2.3.mod")); got != read(t, filepath.Join(dir, "go.mod")) {
		t.Errorf("v1.2.3.mod = %q", got)
	}
	for version, when := range map[string]string{
		"v1.2.3": "2026-01-02T03:04:05Z", pseudo: "2026-08-26T11:24:38Z",
	} {
		var info struct {
			Version string
			Time    time.Time
		}
		if err := json.Unmarshal([]byte(read(t, filepath.Join(at, version+".info"))), &info); err != nil {
			t.Fatal(err)
		}
		if info.Version != version || info.Time.Format(time.RFC3339) != when {
			t.Errorf("%s.info = %+v, want %s", version, info, when)
		}
	}
	z, err := zip.OpenReader(filepath.Join(at, "v1.2.3.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	var names []string
	for _, f := range z.File {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	want := []string{"example.com/Upper@v1.2.3/go.mod", "example.com/Upper@v1.2.3/inner/inner.go",
		"example.com/Upper@v1.2.3/m.go"}
	if !slices.Equal(names, want) {
		t.Errorf("the zip holds %q, want %q (the nested module left out)", names, want)
	}

	// Another run into the same proxy adds to the list.
	if err := run([]string{"-o", out, "example.com/Upper@v1.3.0=" + dir}, io.Discard); err != nil {
		t.Fatal(err)
	}
	if got := read(t, filepath.Join(at, "list")); got != "v1.2.3\nv1.3.0\nv1.10.0\n" {
		t.Errorf("list = %q", got)
	}
}

func TestServesAWorkspacesReplacements(t *testing.T) {
	work := t.TempDir()
	for name, path := range map[string]string{"a": "example.com/a", "b": "example.com/b"} {
		if err := os.Rename(moduleDir(t, path), filepath.Join(work, name)); err != nil {
			t.Fatal(err)
		}
	}
	text := "go 1.26.0\n\nuse (\n\t./a\n\t./b\n)\n\nreplace (\n" +
		"\texample.com/a v0.1.0 => ./a\n\texample.com/b v1.0.0-20260102030405-abcdefabcdef => ./b\n)\n"
	if err := os.WriteFile(filepath.Join(work, "go.work"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := run([]string{"-work", filepath.Join(work, "go.work"), "-o", out}, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"example.com/a/@v/v0.1.0.zip",
		"example.com/b/@v/v1.0.0-20260102030405-abcdefabcdef.zip"} {
		if _, err := os.Stat(filepath.Join(out, name)); err != nil {
			t.Error(err)
		}
	}
}

func TestRefusesWhatItCannotServe(t *testing.T) {
	dir := moduleDir(t, "example.com/m")
	work := filepath.Join(t.TempDir(), "go.work")
	if err := os.WriteFile(work, []byte("go 1.26.0\n\nreplace example.com/m => "+dir+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{},
		{"-o", "OUT"},
		{"example.com/m@v1.0.0=" + dir},
		{"-bogus", "-o", "OUT", "example.com/m@v1.0.0=" + dir},
		{"-o", "OUT", "example.com/m=" + dir},
		{"-o", "OUT", "example.com/m@v1.0.0"},
		{"-o", "OUT", "example.com/m@v1.0=" + dir},
		{"-o", "OUT", "example.com/m@1.0.0=" + dir},
		{"-o", "OUT", "example.com/m@v2.0.0=" + dir},
		{"-o", "OUT", "example.com/other@v1.0.0=" + dir},
		{"-o", "OUT", "example.com/m@v1.0.0=" + filepath.Join(dir, "inner")},
		{"-o", "OUT", "example.com/m@v1.0.0=" + dir, "example.com/m@v1.0.0=" + dir},
		{"-time", "now", "-o", "OUT", "example.com/m@v1.0.0=" + dir},
		{"-work", work, "-o", "OUT"},
		{"-work", filepath.Join(dir, "go.work"), "-o", "OUT"},
	} {
		out := t.TempDir()
		for i := range args {
			if args[i] == "OUT" {
				args[i] = out
			}
		}
		var bad usageError
		if err := run(args, io.Discard); !errors.As(err, &bad) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
		if entries, _ := os.ReadDir(out); len(entries) != 0 {
			t.Errorf("%q wrote %d entries", args, len(entries))
		}
	}
}

// gitRepo makes a git repository holding a module of path in its subdirectory go/, committed
// at a known time, then changes its checkout: an edit, a file git ignores, a file not added.
func gitRepo(t *testing.T, path string) (repo string, committed string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git on the PATH")
	}
	repo = t.TempDir()
	if err := os.Rename(moduleDir(t, path), filepath.Join(repo, "go")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, ".gitignore"), []byte("*.test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	committed = "2026-01-02T03:04:05Z"
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "v1"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_COMMITTER_DATE="+committed, "GIT_AUTHOR_DATE="+committed,
			"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %q: %v: %s", args, err, out)
		}
	}
	for name, text := range map[string]string{
		"go/m.go":      "package m // changed, not committed\n",
		"go/m.test":    "a build's output, which git ignores\n",
		"go/new.go":    "package m // not added\n",
		"go/go.mod":    "module " + path + "\n\ngo 1.26\n\n// changed, not committed\n",
		"go/inner/x.c": "not added\n",
	} {
		if err := os.WriteFile(filepath.Join(repo, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return repo, committed
}

func TestTakesAModuleFromARevision(t *testing.T) {
	repo, committed := gitRepo(t, "example.com/m")
	out := t.TempDir()
	if err := run([]string{"-vcs", "HEAD", "-o", out, "example.com/m@v1.0.0=" + filepath.Join(repo, "go")},
		io.Discard); err != nil {
		t.Fatal(err)
	}
	at := filepath.Join(out, "example.com", "m", "@v")
	// The revision's go.mod and files, none of the checkout's changes; the nested module left
	// out; the commit's time.
	if got := read(t, filepath.Join(at, "v1.0.0.mod")); got != "module example.com/m\n\ngo 1.26\n" {
		t.Errorf("v1.0.0.mod = %q", got)
	}
	z, err := zip.OpenReader(filepath.Join(at, "v1.0.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	defer z.Close()
	files := map[string]string{}
	for _, f := range z.File {
		r, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(r)
		_ = r.Close()
		if err != nil {
			t.Fatal(err)
		}
		files[f.Name] = string(data)
	}
	want := map[string]string{
		"example.com/m@v1.0.0/go.mod":         "module example.com/m\n\ngo 1.26\n",
		"example.com/m@v1.0.0/m.go":           "package m\n",
		"example.com/m@v1.0.0/inner/inner.go": "package inner\n",
	}
	if !maps.Equal(files, want) {
		t.Errorf("the zip holds %q, want %q", files, want)
	}
	if got := read(t, filepath.Join(at, "v1.0.0.info")); got != `{"Version":"v1.0.0","Time":"`+committed+`"}`+"\n" {
		t.Errorf("v1.0.0.info = %q", got)
	}
}

func TestRefusesARevisionItCannotRead(t *testing.T) {
	repo, _ := gitRepo(t, "example.com/m")
	dir := filepath.Join(repo, "go")
	for _, args := range [][]string{
		{"-vcs", "no-such-revision", "-o", "OUT", "example.com/m@v1.0.0=" + dir},
		{"-vcs", "--output=x", "-o", "OUT", "example.com/m@v1.0.0=" + dir},
		{"-vcs", "HEAD", "-o", "OUT", "example.com/m@v1.0.0=" + filepath.Join(dir, "inner")},
		{"-vcs", "HEAD", "-o", "OUT", "example.com/m@v1.0.0=" + t.TempDir()},
	} {
		out := t.TempDir()
		for i := range args {
			if args[i] == "OUT" {
				args[i] = out
			}
		}
		var bad usageError
		if err := run(args, io.Discard); !errors.As(err, &bad) {
			t.Errorf("%q: %v, want a usage error", args, err)
		}
		if entries, _ := os.ReadDir(out); len(entries) != 0 {
			t.Errorf("%q wrote %d entries", args, len(entries))
		}
	}
}
