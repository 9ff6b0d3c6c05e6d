// Command modproxy writes Go modules from directories into a module proxy's layout, the
// files a GOPROXY=file://DIR serves as proxy.golang.org serves its own:
//
//	modproxy [-time RFC3339] [-vcs REV] [-work go.work] -o DIR [path@version=dir...]
//
// For each argument it writes DIR/<path>/@v/<version>.mod (dir/go.mod as it is),
// <version>.zip (the module's files, as `go mod download` would find them in a release: files
// of modules in subdirectories, vendor directories and VCS metadata left out) and
// <version>.info ({"Version", "Time"}), and adds the version to DIR/<path>/@v/list. Paths and
// versions are escaped as the go command escapes them (capitals as !c). A pseudo-version's time
// is the one it carries and it is not listed (proxy.golang.org lists tagged versions only);
// other versions take -time, else $SOURCE_DATE_EPOCH, else (with -vcs) the revision's commit
// time, else now. -work adds the modules a go.work file replaces at a version with a directory
// (`replace path version => ./dir`): the versions a workspace's modules require of one another,
// served from the workspace's own directories.
//
// With -vcs REV a module is what the git repository its directory is in holds at revision REV
// (a tag, a commit, HEAD), as the module proxy makes a module from a tag: its go.mod and the
// files `git archive` gives, so that neither a file git ignores (a build's output) nor a change
// not committed enters. Without it, the directory's files as they are.
//
// dir/go.mod must declare path, and version must be a canonical semantic version that fits the
// path's major version suffix. An error is one line on stderr: exit status 2 for a command line
// that says something else (a flag, an argument, a version, a directory that is not the module
// named), 1 for the rest (a file the zip cannot take, a failure to write).
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

const usage = "usage: modproxy [-time RFC3339] [-vcs REV] [-work go.work] -o DIR [path@version=dir...]"

// usageError is a command line that says something else: a flag, an argument, a version, a
// directory that is not the module named.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

func main() {
	err := run(os.Args[1:], os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		// One line, whatever the error holds (a zip's file errors come a line each).
		fmt.Fprintln(os.Stderr, "modproxy: "+strings.Join(strings.Fields(err.Error()), " "))
		var bad usageError
		if errors.As(err, &bad) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// A module to write: path@version from the files of dir (at rev, when rev is not "").
type target struct {
	mod module.Version
	dir string
	rev string
}

func run(args []string, stdout io.Writer) error {
	flags := flag.NewFlagSet("modproxy", flag.ContinueOnError)
	flags.SetOutput(io.Discard)
	out := flags.String("o", "", "the proxy's directory (made when missing)")
	stamp := flags.String("time", "", "the time of versions that are not pseudo-versions (RFC 3339)")
	work := flags.String("work", "", "a go.work file whose replacements to serve")
	rev := flags.String("vcs", "", "the git revision to take each module from (default: its directory as it is)")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stdout, usage)
			flags.SetOutput(stdout)
			flags.PrintDefaults()
			return err
		}
		return usageError{fmt.Errorf("%v (%s)", err, usage)}
	}
	if *out == "" || flags.NArg() == 0 && *work == "" {
		return usageError{errors.New(usage)}
	}
	when, err := releaseTime(*stamp)
	if err != nil {
		return usageError{err}
	}
	if strings.HasPrefix(*rev, "-") {
		return usageError{fmt.Errorf("-vcs %q is not a revision", *rev)}
	}
	args = flags.Args()
	if *work != "" {
		replaced, err := workReplacements(*work)
		if err != nil {
			return usageError{err}
		}
		args = append(replaced, args...)
	}
	var targets []target
	for _, arg := range args {
		t, err := parseTarget(arg, *rev)
		if err != nil {
			return usageError{err}
		}
		if slices.ContainsFunc(targets, func(o target) bool { return o.mod == t.mod }) {
			return usageError{fmt.Errorf("%s given twice", t.mod)}
		}
		targets = append(targets, t)
	}
	for _, t := range targets {
		if err := write(*out, t, when); err != nil {
			return err
		}
	}
	return nil
}

// releaseTime is the time of the versions that carry none: -time or $SOURCE_DATE_EPOCH; zero
// when neither says one (then a revision's commit time, or now).
func releaseTime(stamp string) (time.Time, error) {
	if stamp != "" {
		t, err := time.Parse(time.RFC3339, stamp)
		if err != nil {
			return time.Time{}, fmt.Errorf("-time %q is not RFC 3339 (2006-01-02T15:04:05Z)", stamp)
		}
		return t.UTC(), nil
	}
	if epoch := os.Getenv("SOURCE_DATE_EPOCH"); epoch != "" {
		seconds, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q is not a number of seconds", epoch)
		}
		return time.Unix(seconds, 0).UTC(), nil
	}
	return time.Time{}, nil
}

// workReplacements are the replacements of a go.work file as path@version=dir arguments; each
// must replace one version of a module with a directory.
func workReplacements(name string) ([]string, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, err
	}
	file, err := modfile.ParseWork(name, data, nil)
	if err != nil {
		return nil, err
	}
	var args []string
	for _, r := range file.Replace {
		if r.Old.Version == "" || r.New.Version != "" || !modfile.IsDirectoryPath(r.New.Path) {
			return nil, fmt.Errorf("%s:%d: not a version of a module replaced with a directory",
				name, r.Syntax.Start.Line)
		}
		dir := r.New.Path
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(filepath.Dir(name), dir)
		}
		args = append(args, r.Old.Path+"@"+r.Old.Version+"="+dir)
	}
	return args, nil
}

// parseTarget reads path@version=dir and checks it against dir/go.mod (at rev, when given).
func parseTarget(arg, rev string) (target, error) {
	spec, dir, ok := strings.Cut(arg, "=")
	path, version, ok2 := strings.Cut(spec, "@")
	if !ok || !ok2 || path == "" || version == "" || dir == "" {
		return target{}, fmt.Errorf("%q is not path@version=dir", arg)
	}
	if err := module.Check(path, version); err != nil {
		return target{}, err
	}
	if module.CanonicalVersion(version) != version {
		return target{}, fmt.Errorf("%s@%s: not a canonical version (%s)", path,
			version, module.CanonicalVersion(version))
	}
	t := target{module.Version{Path: path, Version: version}, dir, rev}
	gomod := filepath.Join(dir, "go.mod")
	if rev != "" {
		gomod = rev + ":" + gomod
	}
	data, err := t.goMod()
	if err != nil {
		return target{}, err
	}
	file, err := modfile.ParseLax(gomod, data, nil)
	if err != nil {
		return target{}, err
	}
	if file.Module == nil || file.Module.Mod.Path != path {
		declared := "no module"
		if file.Module != nil {
			declared = "module " + file.Module.Mod.Path
		}
		return target{}, fmt.Errorf("%s declares %s, not %s", gomod, declared, path)
	}
	return t, nil
}

// goMod is the module's go.mod file.
func (t target) goMod() ([]byte, error) {
	if t.rev == "" {
		return os.ReadFile(filepath.Join(t.dir, "go.mod"))
	}
	// <rev>:./<path> names a path relative to the directory git runs in.
	return git(t.dir, "show", t.rev+":./go.mod")
}

// writeZip writes the module's zip: its directory's files, or the revision's as `git archive`
// gives them (from a repository's own checkout: CreateFromVCS refuses a linked worktree).
func (t target) writeZip(w io.Writer) error {
	if t.rev == "" {
		return zip.CreateFromDir(w, t.mod, t.dir)
	}
	root, err := git(t.dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	sub, err := git(t.dir, "rev-parse", "--show-prefix")
	if err != nil {
		return err
	}
	return zip.CreateFromVCS(w, t.mod, strings.TrimSpace(string(root)), t.rev,
		strings.TrimSuffix(strings.TrimSpace(string(sub)), "/"))
}

// defaultTime is the module's time when neither -time nor $SOURCE_DATE_EPOCH says one: the
// revision's commit time, else now.
func (t target) defaultTime() (time.Time, error) {
	if t.rev == "" {
		return time.Now().UTC().Truncate(time.Second), nil
	}
	out, err := git(t.dir, "log", "-1", "--format=%cI", t.rev, "--")
	if err != nil {
		return time.Time{}, err
	}
	when, err := time.Parse(time.RFC3339, strings.TrimSpace(string(out)))
	return when.UTC(), err
}

// git runs git in dir; its error says what git said.
func git(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	var failed *exec.ExitError
	if errors.As(err, &failed) {
		return nil, fmt.Errorf("git %s in %s: %s", strings.Join(args, " "), dir,
			strings.TrimSpace(string(failed.Stderr)))
	}
	return out, err
}

// write puts one module version into the proxy: its zip, go.mod and info, then its line in list.
func write(out string, t target, when time.Time) error {
	escPath, err := module.EscapePath(t.mod.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(t.mod.Version)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(dir, escVersion)
	if err := writeFile(base+".zip", t.writeZip); err != nil {
		return err
	}
	gomod, err := t.goMod()
	if err != nil {
		return err
	}
	if err := writeFile(base+".mod", func(w io.Writer) error {
		_, err := w.Write(gomod)
		return err
	}); err != nil {
		return err
	}
	if module.IsPseudoVersion(t.mod.Version) {
		if when, err = module.PseudoVersionTime(t.mod.Version); err != nil {
			return err
		}
	} else if when.IsZero() {
		if when, err = t.defaultTime(); err != nil {
			return err
		}
	}
	info := struct {
		Version string
		Time    time.Time
	}{t.mod.Version, when}
	if err := writeFile(base+".info", func(w io.Writer) error {
		return json.NewEncoder(w).Encode(info)
	}); err != nil {
		return err
	}
	if module.IsPseudoVersion(t.mod.Version) {
		return nil
	}
	return addToList(filepath.Join(dir, "list"), t.mod.Version)
}

// addToList adds version to a list of versions, a line each, kept in semantic version order.
func addToList(list, version string) error {
	known, err := os.ReadFile(list)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(known))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	slices.SortFunc(versions, semver.Compare)
	return writeFile(list, func(w io.Writer) error {
		_, err := io.WriteString(w, strings.Join(versions, "\n")+"\n")
		return err
	})
}

// writeFile writes name whole or not at all: into a file beside it, then renamed over it.
func writeFile(name string, fill func(io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	if err = fill(f); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}
