// Package store names what a store can do, in small capabilities, as the Python and
// TypeScript contracts split it: every store is a Log; a store may also have Attempts (run
// leases, open attempts) and Groups (consumer groups). A caller asks for what it needs with
// Need, so that a store without it is refused in one line before anything is done.
package store

import (
	"context"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
)

// Declared is what every store says of itself.
type Declared interface {
	// Tier is what kind of store this is ("redis", "memory"), as refusals and logs name it.
	Tier() string
}

// Log is what every store keeps: appends, reads, waits, artifacts read back.
type Log interface {
	Declared
	// Append writes events to stream if its version is expected (or model.AnyVersion): all of
	// them or none, with consecutive versions. A retry with the same appendID and the same
	// content returns the original result, Deduplicated; other content is an
	// IdempotencyConflictError. WithDurability and WithFence change one append.
	Append(ctx context.Context, stream model.StreamID, expected int64, appendID string, events []model.Event, opts ...AppendOption) (model.AppendResult, error)
	// ReadStream returns the stream's events with versions above opts.After, ascending.
	ReadStream(ctx context.Context, stream model.StreamID, opts ReadStreamOptions) ([]model.RecordedEvent, error)
	// ScanSession returns the session's events after the cursor opts.After, in commit order.
	ScanSession(ctx context.Context, session string, opts ScanOptions) ([]model.RecordedEvent, error)
	// Session yields the session's events after the cursor opts.After, in commit order, a page
	// at a time; it stops at the first error, which it yields.
	Session(ctx context.Context, session string, opts IterOptions) iter.Seq2[model.RecordedEvent, error]
	// Tail returns the session's last opts.N events (before the cursor opts.Before, when
	// given), oldest first, at a cost O(N) whatever the session's length.
	Tail(ctx context.Context, session string, opts TailOptions) ([]model.RecordedEvent, error)
	// WaitSession returns the events after the cursor opts.After, waiting up to opts.Timeout
	// for the first one; none when nothing came.
	WaitSession(ctx context.Context, session string, opts WaitOptions) ([]model.RecordedEvent, error)
	// StreamVersion is the number of events ever appended to the stream (0 for none).
	StreamVersion(ctx context.Context, stream model.StreamID) (int64, error)
	// SessionExists says whether any event was ever appended to the session.
	SessionExists(ctx context.Context, session string) (bool, error)
	// Sessions lists sessions by last activity, newest first.
	Sessions(ctx context.Context, opts SessionsOptions) ([]Activity, error)
	// Artifact returns the bytes of one of the session's artifacts, by its sha256 in hex;
	// an error of kind model.ErrNotFound when there is none such.
	Artifact(ctx context.Context, session, sha256 string) ([]byte, error)
	// Close lets the store's connections go.
	Close() error
}

// LeaseStep is what a Lease call does with a lease.
type LeaseStep string

const (
	Acquire LeaseStep = "acquire"
	Renew   LeaseStep = "renew"
	Release LeaseStep = "release"
)

// Attempts is leases and the calls requested with no outcome yet: what a recorder needs
// besides the log.
type Attempts interface {
	// Lease acquires, renews or releases the lease name of a session, held by one owner and
	// expiring after ttl unless renewed. Acquire and Renew return the token of owner's holding
	// when owner holds the lease afterwards: each new holding (the lease free or expired, then
	// acquired) draws a greater token than any before it, and the same owner acquiring again
	// while it holds the lease keeps its token. An append names the holding in a model.Fence
	// (WithFence) and is refused once it is over. Release returns 1 when owner let the lease
	// go. Each returns 0 when another owner holds the lease or, to renew or release, when it
	// is gone (expired: whoever takes it next, owner included, draws a new token).
	Lease(ctx context.Context, step LeaseStep, session, name, owner string, ttl time.Duration) (int64, error)
	// OpenAttempts lists the session's requested calls with no terminal event yet.
	OpenAttempts(ctx context.Context, session string) ([]model.OpenAttempt, error)
}

// Delivery is one session log entry a consumer group handed to a consumer.
type Delivery struct {
	Event model.RecordedEvent
	// EntryID is what acknowledges it; opaque to callers.
	EntryID string
	// Deliveries is how often the group handed it out.
	Deliveries int64
}

// GroupStats is what a group says of itself.
type GroupStats struct {
	Pending       int64
	LastDelivered string
}

// Groups is consumer groups on a session's log, with the semantics of Redis consumer groups
// (spec/ledger-v1.md section 3.6): what a tailer needs besides the log.
type Groups interface {
	// GroupCreate makes the group, delivering what commits after the cursor after ("": after
	// what is there now); false, changing nothing, when it exists.
	GroupCreate(ctx context.Context, session, group, after string) (bool, error)
	GroupExists(ctx context.Context, session, group string) (bool, error)
	// GroupRead hands consumer up to count events not yet delivered to the group, waiting up
	// to block for the first.
	GroupRead(ctx context.Context, session, group, consumer string, count int, block time.Duration) ([]Delivery, error)
	// GroupPending hands consumer its own pending events again, each counted once more.
	GroupPending(ctx context.Context, session, group, consumer string, count int) ([]Delivery, error)
	// GroupClaim moves to consumer up to count events pending at least minIdle with any
	// consumer.
	GroupClaim(ctx context.Context, session, group, consumer string, minIdle time.Duration, count int) ([]Delivery, error)
	// GroupKeep resets the idle time of entries consumer still works on, without counting.
	GroupKeep(ctx context.Context, session, group, consumer string, entryIDs []string) error
	GroupAck(ctx context.Context, session, group string, entryIDs []string) (int64, error)
	// GroupDeadLetter records the delivery as a dead letter with the reason and acks it, in one
	// step.
	GroupDeadLetter(ctx context.Context, session, group string, delivery Delivery, reason string) error
	GroupDeadLetters(ctx context.Context, session, group string) ([]map[string]string, error)
	// GroupPrune removes consumers idle for idle that hold nothing pending; it returns them.
	GroupPrune(ctx context.Context, session, group string, idle time.Duration) ([]string, error)
	GroupStats(ctx context.Context, session, group string) (GroupStats, error)
}

// Activity is one session of the sessions index: its id, and when it was last appended to.
type Activity struct {
	Session string
	Last    time.Time
}

// ReadStreamOptions narrows ReadStream.
type ReadStreamOptions struct {
	// After: only versions above it (0: from the first).
	After int64
	// Limit: at most this many events (0: all of them).
	Limit int
	// Refs leaves fields kept as artifacts as model.ArtifactRef values instead of their bytes.
	Refs bool
}

// ScanOptions narrows ScanSession.
type ScanOptions struct {
	// After: only events committed after this cursor ("": from the start).
	After string
	// Limit: at most this many events (0: all of them).
	Limit int
	Refs  bool
}

// IterOptions narrows Session.
type IterOptions struct {
	After string
	// Page is how many events are read a round trip (0: 500).
	Page int
	Refs bool
}

// TailOptions narrows Tail.
type TailOptions struct {
	// N is how many of the newest events (0: 20).
	N int
	// Before: only events committed before this cursor ("": up to the newest).
	Before string
	Refs   bool
}

// WaitOptions narrows WaitSession.
type WaitOptions struct {
	// After: only events committed after this cursor ("": only those committed after the call).
	After string
	// Timeout is how long to wait for the first event.
	Timeout time.Duration
	// Limit: at most this many events (0: 500).
	Limit int
	Refs  bool
}

// SessionsOptions narrows Sessions.
type SessionsOptions struct {
	// Limit: at most this many sessions (0: all of them).
	Limit int
}

// AppendOption changes one append.
type AppendOption func(*AppendSettings)

// AppendSettings is what AppendOptions set; stores read it with Settings.
type AppendSettings struct {
	// Durability, when not nil, replaces the store's own for this append.
	Durability *model.Durability
	// Fence, when not nil, is the lease holding the append is made under.
	Fence *model.Fence
}

// WithDurability has one append wait for its own durability instead of the store's.
func WithDurability(d model.Durability) AppendOption {
	return func(s *AppendSettings) { s.Durability = &d }
}

// WithFence makes one append under a lease holding, as Attempts.Lease drew its token: the
// store checks, atomically with the write, that the holding still lasts (the lease held by
// f.Owner, its token f.Token), and otherwise refuses the append with a
// *model.LeaseLostError, writing nothing. The check comes before anything else: a writer whose
// holding is over learns that, not a conflict to retry, nor another writer's append taken for
// its own (the next holder may have used the same append_id at the same version), even for a
// retry of an append it made while it held the lease. A fence that is no fence (Fence.Check)
// is an error of kind model.ErrInvalidInput.
func WithFence(f model.Fence) AppendOption {
	return func(s *AppendSettings) { s.Fence = &f }
}

// Settings applies opts in order.
func Settings(opts []AppendOption) AppendSettings {
	var s AppendSettings
	for _, opt := range opts {
		opt(&s)
	}
	return s
}

// CheckAppend checks an append's arguments as every store takes them, in this order and before
// anything else is looked at: the stream's name, the expected version, the append_id, and the
// fence its options name. It returns the stream as checked and the append's settings; an
// error of kind model.ErrInvalidInput names the first argument that is wrong.
func CheckAppend(stream model.StreamID, expected int64, appendID string, opts []AppendOption) (model.StreamID, AppendSettings, error) {
	checked, err := model.NewStreamID(stream.Session, stream.Name)
	if err != nil {
		return model.StreamID{}, AppendSettings{}, err
	}
	if err := model.CheckExpectedVersion(expected); err != nil {
		return model.StreamID{}, AppendSettings{}, err
	}
	if err := model.CheckAppendID(appendID); err != nil {
		return model.StreamID{}, AppendSettings{}, err
	}
	settings := Settings(opts)
	if err := settings.CheckFence(); err != nil {
		return model.StreamID{}, AppendSettings{}, err
	}
	return checked, settings, nil
}

// CheckFence checks the fence an append's settings name, if any, as every store takes it: an
// error of kind model.ErrInvalidInput when it is no fence.
func (s AppendSettings) CheckFence() error {
	if s.Fence == nil {
		return nil
	}
	return s.Fence.Check()
}

// named is each capability as a refusal names it: the Python contract's words.
func named[C any]() string {
	var c *C
	switch any(c).(type) {
	case *Log:
		return "log"
	case *Attempts:
		return "leases and open attempts"
	case *Groups:
		return "consumer groups"
	}
	return fmt.Sprintf("%T", c)[1:]
}

// Capabilities names the capabilities s has, in the contract's order.
func Capabilities(s any) []string {
	var found []string
	if _, ok := s.(Log); ok {
		found = append(found, named[Log]())
	}
	if _, ok := s.(Attempts); ok {
		found = append(found, named[Attempts]())
	}
	if _, ok := s.(Groups); ok {
		found = append(found, named[Groups]())
	}
	return found
}

// Need returns s as the capability C, or an error of kind model.ErrUnsupported, in one line
// that names what s does have (the same line as the Python package's: "this store (custom)
// has no consumer groups: it has log").
func Need[C any](s any) (C, error) {
	if c, ok := s.(C); ok {
		return c, nil
	}
	var zero C
	tier := fmt.Sprintf("%T", s)
	if d, ok := s.(Declared); ok {
		tier = d.Tier()
	}
	has := "none of the contract's capabilities"
	if found := Capabilities(s); len(found) > 0 {
		has = strings.Join(found, ", ")
	}
	return zero, model.Errorf(model.ErrUnsupported, "this store (%s) has no %s: it has %s", tier, named[C](), has)
}

// EventStore is a store with every capability this SDK names: what Connect returns for Redis and
// memory URLs.
type EventStore interface {
	Log
	Attempts
	Groups
}
