package store

import (
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
)

// Option changes how a store is opened: the one way a store is given its options, by
// ledgerbus.Connect, redisstore.Open and redisstore.New, and memory.New alike.
type Option func(*OpenSettings)

// OpenSettings are what a store is opened with, as its options leave them; each field left zero
// takes the store's default.
type OpenSettings struct {
	// Prefix begins every key of a Redis store ("lb"), so that ledgers can share a database.
	Prefix string
	// Limits bound what an append may hold; each field left zero takes its default.
	Limits model.Limits
	// Durability is what every append waits for unless it asks for its own; nil leaves it
	// to the URL's ?durability=, else local.
	Durability *model.Durability
	// Timeout is how long a call is tried through lost connections and failovers before it
	// fails with model.ErrBackendUnavailable (10 seconds).
	Timeout time.Duration
	// Refs has every read leave fields kept as artifacts as model.ArtifactRef values, as if
	// each read asked for Refs.
	Refs bool
}

// Configure applies opts, in order, to zero OpenSettings.
func Configure(opts ...Option) OpenSettings {
	var set OpenSettings
	for _, opt := range opts {
		opt(&set)
	}
	return set
}

// WithTimeout is how long a call is tried through lost connections and failovers before it
// fails with model.ErrBackendUnavailable (10 seconds unless set).
func WithTimeout(d time.Duration) Option { return func(s *OpenSettings) { s.Timeout = d } }

// WithPrefix begins every Redis key ("lb" unless set), so that ledgers can share a database.
func WithPrefix(prefix string) Option { return func(s *OpenSettings) { s.Prefix = prefix } }

// WithLimits bounds what an append may hold (model.DefaultLimits() unless set).
func WithLimits(l model.Limits) Option { return func(s *OpenSettings) { s.Limits = l } }

// WithDefaultDurability is what every append waits for unless it asks for its own (with
// WithDurability); it overrides a URL's ?durability=. Parse one with model.ParseDurability.
func WithDefaultDurability(d model.Durability) Option {
	return func(s *OpenSettings) { s.Durability = &d }
}

// WithRefs has every read leave fields kept as artifacts as model.ArtifactRef values instead
// of their bytes.
func WithRefs() Option { return func(s *OpenSettings) { s.Refs = true } }

// DurabilityOr is the durability the options give, the zero one meaning local; fallback when
// they give none (a URL's ?durability=, or local).
func (s OpenSettings) DurabilityOr(fallback model.Durability) model.Durability {
	switch {
	case s.Durability == nil:
		return fallback
	case *s.Durability == (model.Durability{}):
		return model.Local()
	default:
		return *s.Durability
	}
}

// TimeoutOr is the timeout the options give; fallback when they give none. A negative one is
// an error of kind model.ErrInvalidInput.
func (s OpenSettings) TimeoutOr(fallback time.Duration) (time.Duration, error) {
	switch {
	case s.Timeout < 0:
		return 0, model.Errorf(model.ErrInvalidInput, "timeout must be positive, got %s", s.Timeout)
	case s.Timeout == 0:
		return fallback, nil
	default:
		return s.Timeout, nil
	}
}
