package ledgerbus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	ledgerbus "github.com/ledger-bus/ledger-bus/go"
	"github.com/ledger-bus/ledger-bus/go/internal/testredis"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
	"github.com/ledger-bus/ledger-bus/go/store/memory"
	"github.com/ledger-bus/ledger-bus/go/store/redisstore"
)

func connect(t *testing.T, url string, opts ...ledgerbus.Option) ledgerbus.Store {
	t.Helper()
	s, err := ledgerbus.Connect(context.Background(), url, opts...)
	if err != nil {
		t.Fatalf("Connect(%q): %v", url, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// roundTrip appends to a store and reads it back, through the one interface every store has.
func roundTrip(t *testing.T, s ledgerbus.Store) {
	t.Helper()
	ctx := context.Background()
	stream, err := ledgerbus.NewStreamID("connect", "s")
	if err != nil {
		t.Fatal(err)
	}
	result, err := s.Append(ctx, stream, 0, "a1", []ledgerbus.Event{ledgerbus.Message("a", "hello")})
	if err != nil || result.LastVersion != 1 {
		t.Fatalf("append: %+v %v", result, err)
	}
	read, err := s.ScanSession(ctx, "connect", store.ScanOptions{})
	if err != nil || len(read) != 1 || read[0].Fields["body"] != "hello" || read[0].Cursor != result.Cursor {
		t.Fatalf("read: %+v %v", read, err)
	}
}

func TestConnectMemory(t *testing.T) {
	s := connect(t, "memory://")
	if _, ok := s.(*memory.Store); !ok || s.Tier() != "memory" {
		t.Fatalf("memory:// opened a %T", s)
	}
	roundTrip(t, s)
	for _, url := range []string{"memory://?durability=replicas:1", "memory://?durability=later"} {
		if _, err := ledgerbus.Connect(context.Background(), url); !errors.Is(err, ledgerbus.ErrInvalidInput) {
			t.Errorf("%s: %v", url, err)
		}
	}
	aof, _ := model.ParseDurability("aof", time.Second)
	if _, err := ledgerbus.Connect(context.Background(), "memory://", ledgerbus.WithDefaultDurability(aof)); !errors.Is(err, ledgerbus.ErrInvalidInput) {
		t.Errorf("memory:// with aof: %v", err)
	}
	limits := model.DefaultLimits()
	limits.MaxEventsPerAppend = 1
	small := connect(t, "memory://", ledgerbus.WithLimits(limits))
	stream, _ := ledgerbus.NewStreamID("s", "t")
	two := []ledgerbus.Event{ledgerbus.Message("a", "1"), ledgerbus.Message("a", "2")}
	if _, err := small.Append(context.Background(), stream, 0, "x", two); !errors.Is(err, ledgerbus.ErrInvalidEvent) {
		t.Errorf("limits not applied: %v", err)
	}
}

func TestConnectRedis(t *testing.T) {
	server := testredis.Start(t)
	s := connect(t, server.URL, ledgerbus.WithPrefix("app"), ledgerbus.WithTimeout(2*time.Second))
	redisStore, ok := s.(*redisstore.Store)
	if !ok || s.Tier() != "redis" {
		t.Fatalf("%s opened a %T", server.URL, s)
	}
	roundTrip(t, s)
	if n := server.Client().Exists(context.Background(), "app:{connect}:log").Val(); n != 1 {
		t.Fatal("the prefix was not used")
	}
	if !redisStore.Durability().Local() {
		t.Fatalf("durability %v", redisStore.Durability())
	}
	level, _ := model.ParseDurability("replicas:2", 300*time.Millisecond)
	withURL := connect(t, server.URL+"?durability=replicas:2&durability_timeout_ms=300")
	if got := withURL.(*redisstore.Store).Durability(); got != level {
		t.Fatalf("the URL's durability: %+v", got)
	}
	// An option overrides the URL's.
	overridden := connect(t, server.URL+"?durability=replicas:2", ledgerbus.WithDefaultDurability(model.Local()))
	if got := overridden.(*redisstore.Store).Durability(); !got.Local() {
		t.Fatalf("overridden durability: %+v", got)
	}
}

func TestConnectReadsTheEnvironment(t *testing.T) {
	server := testredis.Start(t)
	t.Setenv(ledgerbus.EnvURL, server.URL)
	s := connect(t, "")
	if s.Tier() != "redis" {
		t.Fatalf("opened %s", s.Tier())
	}
	roundTrip(t, s)
	t.Setenv(ledgerbus.EnvURL, "memory://")
	if s := connect(t, ""); s.Tier() != "memory" {
		t.Fatalf("opened %s", s.Tier())
	}
}

func TestConnectCluster(t *testing.T) {
	cluster := testredis.StartCluster(t, 3)
	roundTrip(t, connect(t, cluster.URL))
}

func TestConnectRefusesWhatItCannotOpen(t *testing.T) {
	for _, url := range []string{"postgresql://localhost/db", "http://127.0.0.1:6379", "6379"} {
		if _, err := ledgerbus.Connect(context.Background(), url); !errors.Is(err, ledgerbus.ErrInvalidInput) {
			t.Errorf("%s: %v", url, err)
		}
	}
	server := testredis.Start(t)
	server.Kill()
	s := connect(t, server.URL, ledgerbus.WithTimeout(200*time.Millisecond))
	if _, err := s.SessionExists(context.Background(), "x"); !errors.Is(err, ledgerbus.ErrBackendUnavailable) {
		t.Errorf("a server that is down: %v", err)
	}
}
