package model

import (
	"errors"
	"testing"
)

func TestAFenceIsTheScriptsArgument(t *testing.T) {
	f := Fence{Lease: "run-r1", Owner: "3f2a", Token: 12}
	if err := f.Check(); err != nil {
		t.Fatal(err)
	}
	if got := f.LuaArg(); got != "run-r1\x1f3f2a\x1f12" {
		t.Fatalf("the fence as append.lua's ARGV[9]: %q", got)
	}
}

func TestAFenceThatIsNoFenceIsInvalidInput(t *testing.T) {
	for _, f := range []Fence{
		{Lease: "run-1", Owner: "me"},
		{Lease: "run-1", Owner: "me", Token: -3},
		{Lease: "", Owner: "me", Token: 1},
		{Lease: "run-1", Owner: "", Token: 1},
		{Lease: "run 1", Owner: "me", Token: 1},
		{Lease: "run-1", Owner: "me\x1f2", Token: 1},
		{Lease: "{run}", Owner: "me", Token: 1},
	} {
		if err := f.Check(); !errors.Is(err, ErrInvalidInput) || ExitCode(err) != 2 {
			t.Errorf("%+v: %v", f, err)
		}
	}
}

func TestALostLeaseIsARefusalThatSaysWhatBecameOfIt(t *testing.T) {
	fence := Fence{Lease: "run-r1", Owner: "me", Token: 3}
	taken := &LeaseLostError{Fence: fence, Token: 4}
	if want := "lease run-r1: the holding of me (token 3) is over, another holding took it (token 4); nothing written"; taken.Error() != want {
		t.Errorf("taken over:\n got %s\nwant %s", taken, want)
	}
	expired := &LeaseLostError{Fence: fence, Token: 3}
	if want := "lease run-r1: the holding of me (token 3) is over, it expired; nothing written"; expired.Error() != want {
		t.Errorf("expired:\n got %s\nwant %s", expired, want)
	}
	var err error = taken
	for _, k := range []error{ErrLeaseLost, ErrRefused, ErrLedger} {
		if !errors.Is(err, k) {
			t.Errorf("a LeaseLost is not a %v", k)
		}
	}
	if errors.Is(err, ErrSessionArchived) || errors.Is(err, ErrVersionConflict) {
		t.Errorf("a LeaseLost is another refusal's kind too")
	}
	if Name(err) != "LeaseLost" || ExitCode(err) != 1 {
		t.Errorf("name %q, exit code %d", Name(err), ExitCode(err))
	}
}
