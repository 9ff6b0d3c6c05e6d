package redisstore

import (
	"errors"
	"testing"

	"github.com/ledger-bus/ledger-bus/go/model"
)

func TestAppendReplies(t *testing.T) {
	cases := []struct {
		raw  any
		want appendReply
	}{
		{[]any{"ok", int64(1), int64(2), "17-0", int64(1), int64(0)},
			appendReply{kind: appendOK, first: 1, last: 2, cursor: "17-0", opened: 1}},
		{[]any{"dup", int64(3), int64(3), "18-1", int64(2)},
			appendReply{kind: appendDup, first: 3, last: 3, cursor: "18-1", generation: 2}},
		{[]any{"idem"}, appendReply{kind: appendIdem}},
		{[]any{"archived", "sqlite:///a.db"}, appendReply{kind: appendArchived, where: "sqlite:///a.db"}},
		{[]any{"fenced", int64(7)}, appendReply{kind: appendFenced, token: 7}},
		{[]any{"fenced", int64(0)}, appendReply{kind: appendFenced}},
		{[]any{"conflict", int64(4)}, appendReply{kind: appendConflict, version: 4}},
		{[]any{"rewound", int64(0)}, appendReply{kind: appendRewound}},
		{[]any{"noartifact", "lb:{s}:art:ab"}, appendReply{kind: appendNoArtifact, key: "lb:{s}:art:ab"}},
		{[]any{"noperm", "XADD", "lb:{s}:log"}, appendReply{kind: appendNoPerm, command: "XADD", key: "lb:{s}:log"}},
	}
	for _, c := range cases {
		got, err := parseAppendReply(c.raw)
		if err != nil || got != c.want {
			t.Errorf("%v: %+v, %v", c.raw, got, err)
		}
	}
}

func TestUnknownRepliesAreUnexpected(t *testing.T) {
	for _, raw := range []any{
		nil, "ok", int64(1), []any{},
		[]any{"ok", int64(1), int64(2), "17-0", int64(1)},            // one short
		[]any{"ok", "1", int64(2), "17-0", int64(1), int64(0)},       // a string for a number
		[]any{"dup", int64(3), int64(3), "18-1", int64(2), int64(9)}, // one too many
		[]any{"written", int64(1)},                                   // a kind no script gives
		[]any{int64(1), int64(2)},                                    // no kind
		[]any{"noperm", "XADD"},                                      // no key
		[]any{"fenced"},                                              // no token
		[]any{"fenced", "3"},                                         // a string for the token
	} {
		_, err := parseAppendReply(raw)
		if !errors.Is(err, model.ErrUnexpectedReply) || !errors.Is(err, model.ErrBackendRefused) {
			t.Errorf("%#v: %v", raw, err)
		}
	}
	for _, raw := range []any{nil, int64(2), "1", []any{int64(1)}} {
		if _, err := parseArtifactPutReply(raw); !errors.Is(err, model.ErrUnexpectedReply) {
			t.Errorf("artifact_put %#v: %v", raw, err)
		}
	}
	for _, raw := range []any{nil, int64(-1), "1", []any{int64(1)}} {
		if _, err := parseLeaseReply(raw); !errors.Is(err, model.ErrUnexpectedReply) {
			t.Errorf("lease %#v: %v", raw, err)
		}
	}
	for _, token := range []int64{0, 1, 9_000_000_000} {
		if got, err := parseLeaseReply(token); err != nil || got != token {
			t.Errorf("lease %d: %d, %v", token, got, err)
		}
	}
	for _, raw := range []any{
		"x", []any{"1-0"}, []any{[]any{"1-0"}}, []any{[]any{"1-0", []any{"s"}}},
		[]any{[]any{"1-0", []any{"s", int64(1)}}}, []any{[]any{int64(1), []any{}}},
	} {
		if _, err := parseReadStreamReply(raw); !errors.Is(err, model.ErrUnexpectedReply) {
			t.Errorf("read_stream %#v: %v", raw, err)
		}
	}
	if names, err := parseNamesReply("prune_consumers.lua", []any{"a", "b"}); err != nil || len(names) != 2 {
		t.Errorf("names: %v %v", names, err)
	}
	if _, err := parseNamesReply("prune_consumers.lua", []any{"a", int64(1)}); !errors.Is(err, model.ErrUnexpectedReply) {
		t.Errorf("names with a number: %v", err)
	}
}

func TestEntriesAreRead(t *testing.T) {
	got, err := parseReadStreamReply([]any{[]any{"5-1", []any{"s", "x", "v", "1", "p", "\x80"}}})
	if err != nil || len(got) != 1 || got[0].ID != "5-1" || got[0].Values["p"] != "\x80" {
		t.Fatalf("%+v %v", got, err)
	}
	if got, err := parseReadStreamReply([]any{}); err != nil || len(got) != 0 {
		t.Fatalf("no entries: %+v %v", got, err)
	}
}
