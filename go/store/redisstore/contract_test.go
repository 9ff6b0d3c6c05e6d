package redisstore

import (
	"context"
	"testing"

	"github.com/ledger-bus/ledger-bus/go/internal/testredis"
	"github.com/ledger-bus/ledger-bus/go/store"
	"github.com/ledger-bus/ledger-bus/go/storetest"
)

// The shared contract suite, as every store of every language keeps it, against a
// redis-server and against a Redis Cluster of three primaries. Each test names sessions of its
// own, so one store serves them all.

func TestContractOnAServer(t *testing.T) {
	server := testredis.Start(t)
	s := openOn(t, server.URL)
	storetest.Run(t, func(t *testing.T) store.EventStore { return s })
}

func TestContractOnACluster(t *testing.T) {
	cluster := testredis.StartCluster(t, 3)
	s := openOn(t, cluster.URL)
	storetest.Run(t, func(t *testing.T) store.EventStore { return s })
}

// openOn opens a store at url, closed when the test ends.
func openOn(t testing.TB, url string, opts ...store.Option) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, opts...)
	if err != nil {
		t.Fatalf("Open(%s): %v", url, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
