package store_test

import (
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

func TestOptionsApplyInOrderToZeroSettings(t *testing.T) {
	if got := store.Configure(); got != (store.OpenSettings{}) {
		t.Fatalf("no options: %+v", got)
	}
	level, err := model.ParseDurability("replicas:1", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	limits := model.Limits{MaxEventsPerAppend: 7}
	got := store.Configure(
		store.WithPrefix("a"), store.WithPrefix("b"), store.WithTimeout(time.Second),
		store.WithLimits(limits), store.WithDefaultDurability(level), store.WithRefs(),
	)
	if got.Prefix != "b" || got.Timeout != time.Second || got.Limits != limits || !got.Refs {
		t.Fatalf("settings: %+v", got)
	}
	if got.Durability == nil || *got.Durability != level {
		t.Fatalf("durability: %v", got.Durability)
	}
}
