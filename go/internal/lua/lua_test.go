package lua

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// originals is where the scripts every language runs live, from this package's directory.
const originals = "../../../ledger_bus/store/lua"

func TestCopiesAreTheOriginalsByteForByte(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(originals, "*.lua"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scripts in %s (%v)", originals, err)
	}
	var want []string
	for _, path := range paths {
		name := strings.TrimSuffix(filepath.Base(path), ".lua")
		want = append(want, name)
		original, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		copied, ok := Source(name)
		if !ok {
			t.Errorf("%s.lua has no copy: run go generate ./internal/lua", name)
			continue
		}
		if !bytes.Equal([]byte(copied), original) {
			t.Errorf("the copy of %s.lua differs from the original: run go generate ./internal/lua", name)
		}
	}
	slices.Sort(want)
	if got := Names(); !slices.Equal(got, want) {
		t.Errorf("embedded scripts %v, originals %v: run go generate ./internal/lua", got, want)
	}
}

func TestTheProtocolIsTheOriginalByteForByte(t *testing.T) {
	original, err := os.ReadFile(filepath.Join(originals, "protocol.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(Protocol(), original) {
		t.Error("the copy of protocol.json differs from the original: run go generate ./internal/lua")
	}
}

func TestEachScriptRunsItsOwnSource(t *testing.T) {
	for _, s := range []*Script{
		Append, ArchiveAbandon, ArchiveFinish, ArtifactPut, DeleteSession, DeleteStream,
		ForgetSession, Lease, PruneConsumers, ReadStream, Restore,
	} {
		source, ok := Source(s.Name)
		if !ok || source != s.Source {
			t.Errorf("%s: not the source of %s.lua", s.Name, s.Name)
		}
		// EVALSHA names a script by the SHA1 of its bytes: the same as every other language's.
		sum := sha1.Sum([]byte(source))
		if got, want := s.Hash(), hex.EncodeToString(sum[:]); got != want {
			t.Errorf("%s: hash %s, want %s", s.Name, got, want)
		}
	}
	if len(Names()) != 11 {
		t.Errorf("%d scripts embedded; this package names 11: name the new one", len(Names()))
	}
}

func TestUnknownScriptIsNotFound(t *testing.T) {
	if _, ok := Source("no_such_script"); ok {
		t.Fatal("a script that does not exist was found")
	}
}
