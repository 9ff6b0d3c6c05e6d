// Package redisstore is the ledger on Redis: the layout of spec/ledger-v1.md section 6 and the Lua
// scripts every language runs (ledger_bus/store/lua/), so that a Go process, a Python process
// and a Node process share one session, each reading what the others wrote as its own: the
// same keys, the same script bytes, the same payloads, digests, event ids and cursors.
//
// Open takes redis://, rediss://, unix://, redis+cluster:// (the seeds of a Redis Cluster)
// and redis+sentinel:// (the primary Sentinel names) URLs, and the options of package store
// (store.WithPrefix, store.WithTimeout, ...). A Store has every capability of package store:
// the log, run leases and open attempts, consumer groups.
package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// DefaultTimeout is how long a call is tried through lost connections and failovers before it
// fails with model.ErrBackendUnavailable, retries included.
const DefaultTimeout = 10 * time.Second

// DefaultPrefix begins every key of a ledger unless store.WithPrefix says otherwise.
const DefaultPrefix = "lb"

// Store is the ledger on a Redis server, a Redis Cluster or the primary of a Sentinel set.
// It is safe for concurrent use. Make one with Open or New.
type Store struct {
	rdb        redis.UniversalClient
	prefix     string
	limits     model.Limits
	durability model.Durability
	timeout    time.Duration
	refs       bool
	// cluster holds the client as a cluster client, nil for a single server or Sentinel.
	cluster *redis.ClusterClient

	mu sync.Mutex
	// written is what this store was acknowledged of each stream it appended to, to tell a
	// stream rewound by a failover (spec section 3.1, HistoryRewound).
	written map[model.StreamID]*written
	// indexed and openIndexed are when this store last listed each session in the sessions
	// index and in the open-sessions index (milliseconds).
	indexed     map[string]int64
	openIndexed map[string]int64
	// waitAOF is whether the server has WAITAOF, once asked; noReadScript is set once a read
	// found no EVALSHA_RO.
	waitAOF      *bool
	noReadScript bool

	// beforeAppend, when set (by tests), runs before each call of the append script, given
	// how many were made before: a fault injected where no timing could place it.
	beforeAppend func(try int)
}

var _ store.EventStore = (*Store)(nil)

// remembered bounds the maps of what this store knows per stream or session, which would
// otherwise grow with every session it ever wrote to: past it, an entry is forgotten at
// random, which costs one more index refresh or, for a stream, the HistoryRewound check of
// its next append.
const remembered = 100_000

// written is what a store was acknowledged of one stream: its highest version, and in which
// generation of the session (spec section 3.9).
type written struct {
	acknowledged int64
	generation   int64
}

// acknowledge records a version acknowledged in a generation.
func (w *written) acknowledge(last, generation int64) {
	switch {
	case generation > w.generation:
		// The stream was deleted since: its count starts over.
		w.generation, w.acknowledged = generation, last
	case generation == w.generation && last > w.acknowledged:
		w.acknowledged = last
	}
}

// Open opens the store a Redis URL names: redis://[USER:PASS@]HOST:PORT/DB, rediss://...
// (TLS; ssl_ca_certs, ssl_certfile and ssl_keyfile in the query name PEM files, as the Python
// package reads them), unix:///PATH, redis+cluster://[USER:PASS@]H:P,H2:P2/0 (the seeds of a
// Redis Cluster; rediss+cluster:// with TLS) or redis+sentinel://H:P,H2:P2/MASTER/DB (the
// primary the sentinels name; ?sentinel_password=). A query's durability and
// durability_timeout_ms set the durability unless store.WithDefaultDurability does.
//
// A URL that names no store is an error of kind model.ErrInvalidInput. Open reaches no server
// but a cluster's, whose slot map it reads (retried until the timeout): a node that is not in
// cluster mode is an error of kind model.ErrBackendRefused at once.
func Open(ctx context.Context, url string, opts ...store.Option) (*Store, error) {
	parsed, err := parseURL(url)
	if err != nil {
		return nil, err
	}
	set := store.Configure(opts...)
	durability := set.DurabilityOr(parsed.durability)
	set.Durability = &durability
	timeout, err := set.TimeoutOr(DefaultTimeout)
	if err != nil {
		return nil, err
	}
	client, err := parsed.client(timeout, durability)
	if err != nil {
		return nil, err
	}
	s, err := newStore(client, set)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	if s.cluster != nil {
		if err := s.readSlots(ctx, parsed.shown); err != nil {
			_ = client.Close()
			return nil, err
		}
	}
	return s, nil
}

// New returns a store on a go-redis client of the caller's (a *redis.Client, a
// *redis.ClusterClient, or a failover client), which Close closes. The store retries its
// calls itself, up to the timeout (store.WithTimeout): the client's own retries are better off
// (MaxRetries: -1).
func New(client redis.UniversalClient, opts ...store.Option) (*Store, error) {
	return newStore(client, store.Configure(opts...))
}

// newStore is New, with its options applied (Open's with the URL's durability).
func newStore(client redis.UniversalClient, set store.OpenSettings) (*Store, error) {
	prefix := set.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if err := model.CheckName(prefix, "key prefix"); err != nil {
		return nil, err
	}
	limits := set.Limits.WithDefaults()
	durability := set.DurabilityOr(model.Local())
	if err := checkDurability(durability); err != nil {
		return nil, err
	}
	timeout, err := set.TimeoutOr(DefaultTimeout)
	if err != nil {
		return nil, err
	}
	s := &Store{
		rdb:         client,
		prefix:      prefix,
		limits:      limits,
		durability:  durability,
		timeout:     timeout,
		refs:        set.Refs,
		written:     make(map[model.StreamID]*written),
		indexed:     make(map[string]int64),
		openIndexed: make(map[string]int64),
	}
	s.cluster, _ = client.(*redis.ClusterClient)
	return s, nil
}

// Tier says what kind of store this is: "redis".
func (s *Store) Tier() string { return "redis" }

// Limits is what an append to this store may hold.
func (s *Store) Limits() model.Limits { return s.limits }

// Durability is what an append waits for unless it asks for its own.
func (s *Store) Durability() model.Durability { return s.durability }

// Client is the go-redis client the store calls through.
func (s *Store) Client() redis.UniversalClient { return s.rdb }

// Close closes the client; a call made afterwards fails with model.ErrBackendUnavailable.
func (s *Store) Close() error {
	err := s.rdb.Close()
	if errors.Is(err, redis.ErrClosed) {
		return nil // closed twice
	}
	return s.fail(err)
}

// checkSession returns an InvalidInput error unless session can be a session id.
func (s *Store) checkSession(session string) error {
	return model.CheckName(session, "session id")
}

// stamp is this process's clock in milliseconds, for the indexes' scores (the log's cursors
// are the server's).
func stamp() int64 { return time.Now().UnixMilli() }

// token is a random hex string of n bytes, naming what one call writes of its own.
func token(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// remember sets m[key] = value, forgetting an entry first when m holds too many.
func remember[K comparable, V any](m map[K]V, key K, value V) {
	if _, ok := m[key]; !ok && len(m) >= remembered {
		for old := range m {
			delete(m, old)
			break
		}
	}
	m[key] = value
}
