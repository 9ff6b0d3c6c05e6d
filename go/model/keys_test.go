package model

import (
	"encoding/json"
	"path/filepath"
	"testing"
)

// TestConformanceIdempotencyKeys derives every key of conformance/idempotency_keys.json: each
// SDK gives the same logical call the same key.
func TestConformanceIdempotencyKeys(t *testing.T) {
	doc := readJSON(t, filepath.Join(conformance, "idempotency_keys.json")).(map[string]any)
	vectors := doc["keys"].([]any)
	if len(vectors) == 0 {
		t.Fatal("idempotency_keys.json lists no keys")
	}
	for _, raw := range vectors {
		v := raw.(map[string]any)
		incarnation := toInt64(t, v["incarnation"])
		got := IdempotencyKey(v["session_id"].(string), v["run_id"].(string), v["step_id"].(string), incarnation)
		if got != v["key"] {
			t.Errorf("%v: key %s, want %s", v, got, v["key"])
		}
	}
}

func toInt64(t *testing.T, value any) int64 {
	t.Helper()
	n, ok := value.(json.Number)
	if !ok {
		t.Fatalf("not a number: %#v", value)
	}
	out, err := n.Int64()
	if err != nil {
		t.Fatal(err)
	}
	return out
}
