package store_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// TestCheckAppendNamesTheFirstArgumentThatIsWrong: every store checks an append's arguments
// through CheckAppend, in one order, before anything else.
func TestCheckAppendNamesTheFirstArgumentThatIsWrong(t *testing.T) {
	good := model.StreamID{Session: "s", Name: "main"}
	bad := model.StreamID{Session: "", Name: "main"}
	noFence := store.WithFence(model.Fence{Lease: "run-r1", Owner: "me", Token: 0})
	cases := []struct {
		stream   model.StreamID
		expected int64
		appendID string
		opts     []store.AppendOption
		says     string
	}{
		{bad, -7, "", []store.AppendOption{noFence}, "session"},
		{good, -7, "", []store.AppendOption{noFence}, "expected"},
		{good, 0, "", []store.AppendOption{noFence}, "append_id"},
		{good, 0, "a1", []store.AppendOption{noFence}, "token"},
	}
	for _, c := range cases {
		_, _, err := store.CheckAppend(c.stream, c.expected, c.appendID, c.opts)
		if !errors.Is(err, model.ErrInvalidInput) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, not an InvalidInput naming %s", c, err, c.says)
		}
	}
	stream, settings, err := store.CheckAppend(good, model.AnyVersion, "a1", []store.AppendOption{
		store.WithFence(model.Fence{Lease: "run-r1", Owner: "me", Token: 3}),
	})
	if err != nil || stream != good || settings.Fence == nil || settings.Fence.Token != 3 {
		t.Errorf("a good append: %v, %+v, %v", stream, settings, err)
	}
}
