package redisstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ledger-bus/ledger-bus/go/internal/lua"
	"github.com/ledger-bus/ledger-bus/go/model"
)

// The scripts' calling convention is written down once, in ledger_bus/store/lua/protocol.json
// (the lua package embeds a copy): these tests hold the store's key builder and reply parser
// of each script it runs to it, as tests/contract/test_script_protocol.py holds Python's.

type protocol struct {
	Keys    map[string]string `json:"keys"`
	Scripts map[string]struct {
		Keys         []string        `json:"keys"`
		OptionalKeys []string        `json:"optional_keys"`
		Reply        json.RawMessage `json:"reply"`
	} `json:"scripts"`
}

func readProtocol(t *testing.T) protocol {
	t.Helper()
	var p protocol
	if err := json.Unmarshal(lua.Protocol(), &p); err != nil {
		t.Fatalf("protocol.json: %v", err)
	}
	return p
}

// sample is what each placeholder of a key's template is here; a starred key is one per item
// of the list lists names.
var (
	sample = map[string]string{
		"prefix": "lb", "session": "S1", "stream": "run-r1", "sha256": strings.Repeat("ab", 32),
		"token": "t0k", "name": "run-r1", "group": "g1",
		"bucket": fmt.Sprintf("%02d", crc32.ChecksumIEEE([]byte("S1"))%64),
	}
	sampleArtifacts = []string{strings.Repeat("cd", 32), strings.Repeat("ef", 32)}
	lists           = map[string]struct {
		placeholder string
		items       []string
	}{"artifact": {"sha256", sampleArtifacts}}
	placeholder = regexp.MustCompile(`<(\w+)>`)
)

func (p protocol) render(family string, given map[string]string) string {
	return placeholder.ReplaceAllStringFunc(p.Keys[family], func(m string) string {
		name := m[1 : len(m)-1]
		if v, ok := given[name]; ok {
			return v
		}
		return sample[name]
	})
}

func (p protocol) keysOf(t *testing.T, entries []string) []string {
	var keys []string
	for _, entry := range entries {
		family, many := strings.CutSuffix(entry, "*")
		if !many {
			keys = append(keys, p.render(family, nil))
			continue
		}
		list, ok := lists[family]
		if !ok {
			t.Fatalf("no sample list for %s", entry)
		}
		for _, item := range list.items {
			keys = append(keys, p.render(family, map[string]string{list.placeholder: item}))
		}
	}
	return keys
}

func TestEachScriptsKeysAreBuiltAsTheProtocolSays(t *testing.T) {
	p := readProtocol(t)
	s := &Store{prefix: sample["prefix"]}
	// Every script this store runs (lua.Append, lua.ArtifactPut, lua.Lease, lua.ReadStream,
	// lua.PruneConsumers), by its builder.
	built := map[string][]string{
		"append":          s.appendKeys(sample["session"], sample["stream"]),
		"artifact_put":    s.artifactPutKeys(sample["session"], sample["sha256"], sample["token"]),
		"lease":           s.leaseKeys(sample["session"], sample["name"]),
		"read_stream":     s.readStreamKeys(sample["session"], sample["stream"]),
		"prune_consumers": s.pruneConsumersKeys(sample["session"]),
	}
	for script, got := range built {
		described, ok := p.Scripts[script]
		if !ok {
			t.Fatalf("protocol.json does not describe %s", script)
		}
		if want := p.keysOf(t, described.Keys); !slices.Equal(got, want) {
			t.Errorf("%s: KEYS %q, the protocol says %q", script, got, want)
		}
	}
	artifacts := s.artifactKeys(sample["session"], sampleArtifacts)
	if want := p.keysOf(t, p.Scripts["append"].OptionalKeys); !slices.Equal(artifacts, want) {
		t.Errorf("append: artifacts' KEYS %q, the protocol says %q", artifacts, want)
	}
}

// field is a kind's field as protocol.json gives it: [name, type].
type field [2]string

// sampleReply is a reply of kind as go-redis gives it over RESP2, and its fields' values.
func sampleReply(kind string, fields []field) ([]any, map[string]any) {
	raw, values := []any{kind}, map[string]any{}
	for at, f := range fields {
		var v any = fmt.Sprintf("%s-%d", f[0], at)
		if f[1] == "int" {
			v = int64(11 + at)
		}
		raw, values[f[0]] = append(raw, v), v
	}
	return raw, values
}

func TestAppendRepliesAreReadAsTheProtocolSays(t *testing.T) {
	p := readProtocol(t)
	var kinds map[string][]field
	if err := json.Unmarshal(p.Scripts["append"].Reply, &kinds); err != nil {
		t.Fatal(err)
	}
	for kind, fields := range kinds {
		raw, values := sampleReply(kind, fields)
		got, err := parseAppendReply(raw)
		if err != nil || got.kind != kind {
			t.Fatalf("%s: %+v, %v", kind, got, err)
		}
		// Each field the protocol names is the parsed reply's field of that name; the others
		// are left zero.
		v := reflect.ValueOf(got)
		for i := 0; i < v.NumField(); i++ {
			name := v.Type().Field(i).Name
			value := v.Field(i)
			want, named := values[name]
			switch {
			case name == "kind":
			case !named && !value.IsZero():
				t.Errorf("%s: %s is set, the protocol names no such field", kind, name)
			case named && value.Kind() == reflect.Int64 && value.Int() != want:
				t.Errorf("%s: %s is %d, not %v", kind, name, value.Int(), want)
			case named && value.Kind() == reflect.String && value.String() != want:
				t.Errorf("%s: %s is %q, not %v", kind, name, value.String(), want)
			}
		}
		for name := range values {
			if _, ok := v.Type().FieldByName(name); !ok {
				t.Errorf("%s: the reply has no field %s", kind, name)
			}
		}
		// A reply unlike the protocol's: a field short, one more, a field of the other type.
		odd := [][]any{append(slices.Clone(raw), "more")}
		if len(fields) > 0 {
			odd = append(odd, raw[:len(raw)-1])
		}
		for at, f := range fields {
			wrong := slices.Clone(raw)
			wrong[at+1] = any("12")
			if f[1] == "text" {
				wrong[at+1] = int64(12)
			}
			odd = append(odd, wrong)
		}
		for _, reply := range odd {
			if _, err := parseAppendReply(reply); !errors.Is(err, model.ErrUnexpectedReply) {
				t.Errorf("%s: %q read without an error (%v)", kind, reply, err)
			}
		}
	}
	if _, err := parseAppendReply([]any{"nosuchkind"}); !errors.Is(err, model.ErrUnexpectedReply) {
		t.Errorf("a kind the protocol does not list was read: %v", err)
	}
}

func TestRepliesOfOneValueOrAListAreReadAsTheProtocolSays(t *testing.T) {
	p := readProtocol(t)
	shape := func(script string) string {
		var s string
		if err := json.Unmarshal(p.Scripts[script].Reply, &s); err != nil {
			t.Fatalf("%s: a reply of kinds, not one value: %v", script, err)
		}
		return s
	}
	if shape("artifact_put") != "flag" || shape("lease") != "integer" ||
		shape("read_stream") != "entries" || shape("prune_consumers") != "names" {
		t.Fatal("the protocol's shapes are not those these parsers read: change the parsers")
	}
	for raw, want := range map[int64]bool{1: true, 0: false} {
		if got, err := parseArtifactPutReply(raw); err != nil || got != want {
			t.Errorf("flag %d: %v, %v", raw, got, err)
		}
	}
	for _, raw := range []any{int64(2), int64(-1), "1", nil} {
		if _, err := parseArtifactPutReply(raw); !errors.Is(err, model.ErrUnexpectedReply) {
			t.Errorf("flag %v read", raw)
		}
	}
	for _, n := range []int64{0, 1, 7} {
		if got, err := parseLeaseReply(n); err != nil || got != n {
			t.Errorf("integer %d: %d, %v", n, got, err)
		}
	}
	for _, raw := range []any{int64(-1), "7", nil} {
		if _, err := parseLeaseReply(raw); !errors.Is(err, model.ErrUnexpectedReply) {
			t.Errorf("integer %v read", raw)
		}
	}
	entries, err := parseReadStreamReply([]any{[]any{"1-0", []any{"s", "run-r1", "v", "1"}}})
	want := []redis.XMessage{{ID: "1-0", Values: map[string]any{"s": "run-r1", "v": "1"}}}
	if err != nil || !reflect.DeepEqual(entries, want) {
		t.Errorf("entries: %v, %v", entries, err)
	}
	for _, raw := range []any{[]any{[]any{"1-0"}}, []any{[]any{"1-0", []any{"s"}}}, "x", nil} {
		if _, err := parseReadStreamReply(raw); !errors.Is(err, model.ErrUnexpectedReply) {
			t.Errorf("entries %v read", raw)
		}
	}
	names, err := parseNamesReply("prune_consumers.lua", []any{"a", "b"})
	if err != nil || !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("names: %v, %v", names, err)
	}
	for _, raw := range []any{"a", []any{int64(1)}, nil} {
		if _, err := parseNamesReply("prune_consumers.lua", raw); !errors.Is(err, model.ErrUnexpectedReply) {
			t.Errorf("names %v read", raw)
		}
	}
}
