package agent

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReprIsPythons compares pyRepr with Python's repr of the same JSON values.
func TestReprIsPythons(t *testing.T) {
	py, err := filepath.Abs(filepath.Join("..", "..", ".venv", "bin", "python"))
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
		if got := pyRepr(numbers(v)); got != want[i] {
			t.Errorf("repr of %s:\n go:     %s\n python: %s", text, got, want[i])
		}
	}
}

// numbers turns json.Numbers into what a payload decodes to: int64 for an integer literal,
// else float64.
func numbers(v any) any {
	switch x := v.(type) {
	case json.Number:
		if n, err := x.Int64(); err == nil && !strings.ContainsAny(x.String(), ".eE") {
			return n
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i := range x {
			x[i] = numbers(x[i])
		}
	case map[string]any:
		for k := range x {
			x[k] = numbers(x[k])
		}
	}
	return v
}
