package memory_test

import (
	"testing"

	"github.com/ledger-bus/ledger-bus/go/store"
	"github.com/ledger-bus/ledger-bus/go/store/memory"
	"github.com/ledger-bus/ledger-bus/go/storetest"
)

// TestContract holds a new store per test to the whole contract.
func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.EventStore {
		s := memory.New()
		t.Cleanup(func() { s.Close() })
		return s
	})
}

// TestContractShared holds one store, shared by every test, to the contract: the tests name
// sessions of their own, so none sees another's.
func TestContractShared(t *testing.T) {
	if testing.Short() {
		t.Skip("the contract on a new store per test is enough in -short")
	}
	s := memory.New()
	t.Cleanup(func() { s.Close() })
	storetest.Run(t, func(*testing.T) store.EventStore { return s })
}

// logOnly is a store that is a log and nothing more.
type logOnly struct{ store.Log }

// TestContractLogOnly runs the log's part alone on a store that has nothing else, as a store
// written elsewhere with fewer capabilities would.
func TestContractLogOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("the log's part is run by TestContract")
	}
	storetest.RunLog(t, func(t *testing.T) store.Log {
		s := memory.New()
		t.Cleanup(func() { s.Close() })
		return logOnly{s}
	})
}
