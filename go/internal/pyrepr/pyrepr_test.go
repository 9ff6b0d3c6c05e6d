package pyrepr_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ledger-bus/ledger-bus/go/internal/pyrepr"
	"github.com/ledger-bus/ledger-bus/go/model"
)

// TestReprIsPythons compares Repr with Python's repr of the same JSON values.
func TestReprIsPythons(t *testing.T) {
	py, err := filepath.Abs(filepath.Join("..", "..", "..", ".venv", "bin", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(py); err != nil {
		t.Skipf("the repository's Python is not installed (make install): %v", err)
	}
	values := []string{
		`{"error": "ValueError", "message": "it's \"quoted\""}`,
		`{"message": "it's", "z": {"a": [], "b": {}}}`,
		`"tab\there\nand\\ a \u0007 bell \u00e9 \ud83d\ude00 \u00a0 \u2028 \u0085"`,
		`[1, -2, 2.5, 1.0, -0.0, 1e16, 1e15, 1e-5, 0.0001, 123456789012345680000.0, 3.141592653589793, 1e-300]`,
		`[null, true, false, "", "\"", "'", "'\""]`,
		`{"outcome": "unknown", "resolved_by": "operator"}`,
	}
	cmd := exec.Command(py, "-c", "import json, sys\nfor line in sys.stdin: print(repr(json.loads(line)))")
	cmd.Stdin = strings.NewReader(strings.Join(values, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	for i, text := range values {
		decoder := json.NewDecoder(bytes.NewReader([]byte(text)))
		decoder.UseNumber()
		var v any
		if err := decoder.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if got := pyrepr.Repr(model.ReadNumbers(v)); got != want[i] {
			t.Errorf("repr of %s:\n go:     %s\n python: %s", text, got, want[i])
		}
	}
}

// TestAnEventIsAnObject: a named map of string keys reads as the object it is.
func TestAnEventIsAnObject(t *testing.T) {
	event := model.Event{"type": "message", "n": int64(1)}
	if got := pyrepr.Repr(event); got != "{'n': 1, 'type': 'message'}" {
		t.Errorf("repr of an event: %s", got)
	}
}
