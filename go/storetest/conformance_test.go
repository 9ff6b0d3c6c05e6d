package storetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/ledger-bus/ledger-bus/go/model"
)

func TestVectorsAreFoundFromBelow(t *testing.T) {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	path, err := findVectors(dir)
	if err != nil {
		t.Fatal(err)
	}
	deeper := filepath.Join(filepath.Dir(filepath.Dir(path)), "go", "store", "memory")
	if again, err := findVectors(deeper); err != nil || again != path {
		t.Errorf("from %s: %q, %v; want %q", deeper, again, err, path)
	}
	if _, err := findVectors(t.TempDir()); err == nil {
		t.Errorf("vectors found where there are none")
	}
}

func TestVectorsAreReadWhole(t *testing.T) {
	found := loadVectors(t)
	if len(found.Scenarios) < 6 {
		t.Fatalf("%d scenarios", len(found.Scenarios))
	}
	steps := 0
	for _, sc := range found.Scenarios {
		if _, err := model.NewStreamID(sc.Session+"-000000000000", "s"); err != nil {
			t.Errorf("%s: a session id with a suffix is refused: %v", sc.Name, err)
		}
		for n, st := range sc.Steps {
			kinds := 0
			for _, given := range []bool{st.Append != nil, st.Read != nil, st.Scan != nil} {
				if given {
					kinds++
				}
			}
			if kinds != 1 || len(st.Expect) == 0 {
				t.Errorf("%s, step %d: %d operations, %d expectations", sc.Name, n, kinds, len(st.Expect))
			}
			for key := range st.Expect {
				if !expectKeys[key] {
					t.Errorf("%s, step %d: unknown expectation %q", sc.Name, n, key)
				}
			}
			steps++
		}
	}
	// Numbers are the Go values an append takes: integers int64, never json.Number or float64.
	ints := 0
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case int64:
			ints++
		case json.Number, float64:
			t.Errorf("a number read as %T: %v", v, v)
		case map[string]any:
			for _, item := range v {
				walk(item)
			}
		case model.Event:
			walk(map[string]any(v))
		case []any:
			for _, item := range v {
				walk(item)
			}
		}
	}
	for _, sc := range found.Scenarios {
		for _, st := range sc.Steps {
			walk(st.Expect)
			if st.Append != nil {
				walk(st.Append.Expected)
				for _, event := range st.Append.Events {
					walk(event)
				}
			}
		}
	}
	if ints == 0 {
		t.Errorf("no integer in the vectors")
	}
	if steps < 20 {
		t.Errorf("%d steps", steps)
	}
}
