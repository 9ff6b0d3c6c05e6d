package ledgerbus

import (
	"context"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
	"github.com/ledger-bus/ledger-bus/go/store/memory"
	"github.com/ledger-bus/ledger-bus/go/store/redisstore"
)

// The common names of package model and package store, so that the common case needs one
// import.
type (
	// Event is one event as an append takes it and a read returns it: see model.Event.
	Event = model.Event
	// StreamID names a stream of a session: see model.StreamID.
	StreamID = model.StreamID
	// RecordedEvent is a committed event: see model.RecordedEvent.
	RecordedEvent = model.RecordedEvent
	// AppendResult is what an append committed: see model.AppendResult.
	AppendResult = model.AppendResult
	// OpenAttempt is a requested call with no terminal event yet: see model.OpenAttempt.
	OpenAttempt = model.OpenAttempt
	// Limits bound what one append may carry: see model.Limits.
	Limits = model.Limits
	// Durability is what an append waits for: see model.Durability.
	Durability = model.Durability
	// ArtifactRef stands for a field kept apart, in reads that ask for references.
	ArtifactRef = model.ArtifactRef
	// Fence is a lease as its holder holds it, which appends made under it name: see
	// model.Fence.
	Fence = model.Fence
	// Store is a store with every capability: what Connect returns.
	Store = store.EventStore
)

// AnyVersion is the expected version that accepts whatever version the stream has.
const AnyVersion = model.AnyVersion

// EnvURL is the environment variable Connect reads when it is given no URL, as every
// ledger-bus client does.
const EnvURL = "LEDGER_BUS_URL"

// DefaultURL is the store Connect opens when it is given no URL and EnvURL is not set.
const DefaultURL = "redis://127.0.0.1:6379/0"

// The kinds of error every call may return (spec/ledger-v1.md section 4); test with errors.Is.
// They are package model's, under the same names.
var (
	ErrLedger                 = model.ErrLedger
	ErrInvalidInput           = model.ErrInvalidInput
	ErrInvalidEvent           = model.ErrInvalidEvent
	ErrVersionConflict        = model.ErrVersionConflict
	ErrHistoryRewound         = model.ErrHistoryRewound
	ErrIdempotencyConflict    = model.ErrIdempotencyConflict
	ErrBackendUnavailable     = model.ErrBackendUnavailable
	ErrBackendRefused         = model.ErrBackendRefused
	ErrUnsupported            = model.ErrUnsupported
	ErrUnexpectedReply        = model.ErrUnexpectedReply
	ErrRefused                = model.ErrRefused
	ErrSessionArchived        = model.ErrSessionArchived
	ErrLeaseLost              = model.ErrLeaseLost
	ErrNotFound               = model.ErrNotFound
	ErrDurabilityNotConfirmed = model.ErrDurabilityNotConfirmed
)

// NewStreamID returns the stream name of session, both names checked: see model.NewStreamID.
func NewStreamID(session, name string) (StreamID, error) { return model.NewStreamID(session, name) }

// Message is an event saying an agent said body.
func Message(agent, body string) Event { return model.Message(agent, body) }

// ToolCall is an event requesting a call of tool with args, as attempt attemptID; append it
// before the call runs.
func ToolCall(agent, tool, attemptID string, args map[string]any) Event {
	return model.ToolCall(agent, tool, attemptID, args)
}

// ToolResult is the terminal event of the call attemptID of tool: status "ok" or "error".
func ToolResult(agent, tool, attemptID, status string, result any) Event {
	return model.ToolResult(agent, tool, attemptID, status, result)
}

// Mutation is an event saying session state changed: kind names how, fields carry what.
func Mutation(agent, kind string, fields map[string]any) Event {
	return model.Mutation(agent, kind, fields)
}

// WithDurability has one append wait for its own durability instead of the store's.
func WithDurability(d Durability) store.AppendOption { return store.WithDurability(d) }

// WithFence makes one append under a lease holding: refused with ErrLeaseLost, nothing
// written, once the holding is over (see store.WithFence).
func WithFence(f Fence) store.AppendOption { return store.WithFence(f) }

// Option changes how Connect opens a store: package store's options, given the one way to
// every store.
type Option = store.Option

// WithTimeout is how long a call is tried through lost connections and failovers before it fails
// with ErrBackendUnavailable (10 seconds unless set).
func WithTimeout(d time.Duration) Option { return store.WithTimeout(d) }

// WithPrefix begins every Redis key ("lb" unless set), so that ledgers can share a database.
func WithPrefix(prefix string) Option { return store.WithPrefix(prefix) }

// WithLimits bounds what an append may hold (model.DefaultLimits() unless set).
func WithLimits(l Limits) Option { return store.WithLimits(l) }

// WithDefaultDurability is what every append waits for unless it asks for its own (with
// WithDurability); it overrides the URL's ?durability=. Parse one with model.ParseDurability.
func WithDefaultDurability(d Durability) Option { return store.WithDefaultDurability(d) }

// WithRefs has every read leave fields kept as artifacts as ArtifactRef values instead of
// their bytes.
func WithRefs() Option { return store.WithRefs() }

// Connect opens the store url names: "redis://HOST:PORT/DB", "rediss://..." (TLS),
// "unix:///PATH", "redis+cluster://[USER:PASS@]H:P,H2:P2/0" (the seeds of a Redis Cluster),
// "redis+sentinel://H:P,H2:P2/MASTER/DB" or "memory://" (this process's memory, for tests and
// demos). An empty url reads LEDGER_BUS_URL, then falls back to DefaultURL. A Redis URL's
// query may set the durability: ?durability=replicas:1&durability_timeout_ms=1000.
//
// A Redis store is opened without reaching the server (but a cluster's, whose slot map is
// read): its first call says whether it answers.
func Connect(ctx context.Context, url string, opts ...Option) (Store, error) {
	if url == "" {
		url = os.Getenv(EnvURL)
	}
	if url == "" {
		url = DefaultURL
	}
	scheme, _, _ := strings.Cut(url, ":")
	if strings.EqualFold(scheme, "memory") {
		return connectMemory(url, opts)
	}
	return redisstore.Open(ctx, url, opts...)
}

// connectMemory opens a memory store; it keeps nothing beyond this process, so it can have no
// durability beyond local.
func connectMemory(given string, opts []Option) (Store, error) {
	set := store.Configure(opts...)
	level := "local"
	if _, query, ok := strings.Cut(given, "?"); ok {
		values, err := url.ParseQuery(query)
		if err != nil {
			return nil, model.Errorf(model.ErrInvalidInput, "a malformed query in '%s': %v", given, err)
		}
		if d := values.Get("durability"); d != "" {
			level = d
		}
		if ms := values.Get("durability_timeout_ms"); ms != "" {
			if _, err := strconv.ParseUint(ms, 10, 63); err != nil {
				return nil, model.Errorf(model.ErrInvalidInput, "durability_timeout_ms must be milliseconds: '%s'", given)
			}
		}
	}
	asked, err := model.ParseDurability(level, model.DefaultDurabilityTimeout)
	if err != nil {
		return nil, err
	}
	if d := set.DurabilityOr(asked); !d.Local() {
		return nil, model.Errorf(model.ErrInvalidInput, "memory:// keeps nothing beyond this process: durability %s", d)
	}
	if _, err := set.TimeoutOr(0); err != nil {
		return nil, err
	}
	return memory.New(opts...), nil
}
