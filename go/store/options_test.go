package store_test

import (
	"errors"
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

// What the settings resolve to, the one place Open, New and Connect take them from.
func TestSettingsResolveTheirDefaults(t *testing.T) {
	replicas := model.Durability{Replicas: 1, Timeout: time.Second}
	if got := store.Configure().DurabilityOr(replicas); got != replicas {
		t.Fatalf("no durability given: %s, not the fallback", got)
	}
	if got := store.Configure(store.WithDefaultDurability(model.Durability{})).DurabilityOr(replicas); !got.Local() {
		t.Fatalf("the zero durability given: %s, not local", got)
	}
	if got := store.Configure(store.WithDefaultDurability(replicas)).DurabilityOr(model.Local()); got != replicas {
		t.Fatalf("a durability given: %s", got)
	}
	if got, err := store.Configure().TimeoutOr(time.Minute); got != time.Minute || err != nil {
		t.Fatalf("no timeout given: %s, %v", got, err)
	}
	if got, err := store.Configure(store.WithTimeout(time.Second)).TimeoutOr(time.Minute); got != time.Second || err != nil {
		t.Fatalf("a timeout given: %s, %v", got, err)
	}
	if _, err := store.Configure(store.WithTimeout(-time.Second)).TimeoutOr(time.Minute); !errors.Is(err, model.ErrInvalidInput) {
		t.Fatalf("a negative timeout: %v", err)
	}
}
