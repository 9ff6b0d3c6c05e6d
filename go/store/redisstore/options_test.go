package redisstore

import (
	"context"
	"testing"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// Open adds the URL's durability to the options it is given without writing into the caller's
// slice: two goroutines opening stores from one slice must not see each other's.
func TestOpenLeavesTheCallersOptionsAlone(t *testing.T) {
	base := make([]store.Option, 1, 4)
	base[0] = store.WithPrefix("p")
	room := base[:2] // the next slot of the caller's array
	s, err := Open(context.Background(), "redis://127.0.0.1:1/0?durability=replicas:1", base...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if room[1] != nil {
		t.Fatal("Open wrote into the caller's slice")
	}
	if got := s.Durability(); got.Local() {
		t.Fatalf("the URL's durability was lost: %s", got)
	}
}

// The zero Durability, given as the default, is local, whatever the URL says.
func TestAZeroDefaultDurabilityIsLocal(t *testing.T) {
	s, err := Open(context.Background(), "redis://127.0.0.1:1/0?durability=replicas:1",
		store.WithDefaultDurability(model.Durability{}))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = s.Close() }()
	if got := s.Durability(); !got.Local() {
		t.Fatalf("durability %s, not local", got)
	}
}
