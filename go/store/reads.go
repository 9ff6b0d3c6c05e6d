package store

import (
	"context"
	"iter"
	"time"

	"github.com/ledger-bus/ledger-bus/go/model"
)

// What the read options' zero values mean, for every store.
const (
	// DefaultPage is how many events Session reads a round trip.
	DefaultPage = 500
	// DefaultTail is how many events Tail returns.
	DefaultTail = 20
	// DefaultWait is how many events WaitSession returns at most.
	DefaultWait = 500
)

// CheckCount refuses a negative count (a limit, a page, n) with an error of kind
// model.ErrInvalidInput naming it; 0 means the call's default.
func CheckCount(n int, what string) error {
	if n < 0 {
		return model.Errorf(model.ErrInvalidInput, "%s must be an int >= 0, got %d", what, n)
	}
	return nil
}

// CheckReadStream checks a ReadStream call's arguments as every store does: the stream's
// names, a version to read after (>= 0) and a limit (>= 0); it returns the stream checked.
func CheckReadStream(stream model.StreamID, opts ReadStreamOptions) (model.StreamID, error) {
	stream, err := model.NewStreamID(stream.Session, stream.Name)
	if err != nil {
		return stream, err
	}
	if opts.After < 0 {
		return stream, model.Errorf(model.ErrInvalidInput, "after must be a version >= 0, got %d", opts.After)
	}
	return stream, CheckCount(opts.Limit, "limit")
}

// orDefault is n checked, or fallback when n is 0.
func orDefault(n, fallback int, what string) (int, error) {
	if err := CheckCount(n, what); err != nil {
		return 0, err
	}
	if n == 0 {
		return fallback, nil
	}
	return n, nil
}

// PageSize is o.Page checked, DefaultPage when it is 0.
func (o IterOptions) PageSize() (int, error) { return orDefault(o.Page, DefaultPage, "page") }

// Count is o.N checked, DefaultTail when it is 0.
func (o TailOptions) Count() (int, error) { return orDefault(o.N, DefaultTail, "n") }

// MaxEvents is o.Limit checked, DefaultWait when it is 0.
func (o WaitOptions) MaxEvents() (int, error) { return orDefault(o.Limit, DefaultWait, "limit") }

// Scan is a store's ScanSession.
type Scan func(ctx context.Context, session string, opts ScanOptions) ([]model.RecordedEvent, error)

// Paged yields a session's events after the cursor opts.After through scan, a page of
// opts.PageSize() at a time, each page after the last cursor of the one before: a store's
// Session over its own ScanSession. It stops at the first error, which it yields.
func Paged(ctx context.Context, session string, opts IterOptions, scan Scan) iter.Seq2[model.RecordedEvent, error] {
	return func(yield func(model.RecordedEvent, error) bool) {
		page, err := opts.PageSize()
		if err != nil {
			yield(model.RecordedEvent{}, err)
			return
		}
		after := opts.After
		for {
			events, err := scan(ctx, session, ScanOptions{After: after, Limit: page, Refs: opts.Refs})
			if err != nil {
				yield(model.RecordedEvent{}, err)
				return
			}
			for _, event := range events {
				if !yield(event, nil) {
					return
				}
			}
			if len(events) < page {
				return
			}
			after = events[len(events)-1].Cursor
		}
	}
}

// CheckLease checks a Lease call's arguments, as every store takes them: the session and lease
// names, the step, and for Acquire and Renew a ttl of a millisecond or more (the least Redis
// keeps a key for: it refuses SET PX 0). An error of kind model.ErrInvalidInput names the fault.
func CheckLease(step LeaseStep, session, name string, ttl time.Duration) error {
	if err := model.CheckName(session, "session id"); err != nil {
		return err
	}
	if err := model.CheckName(name, "lease name"); err != nil {
		return err
	}
	switch step {
	case Acquire, Renew:
		if ttl < time.Millisecond {
			return model.Errorf(model.ErrInvalidInput, "a lease's ttl must be at least 1ms, got %s", ttl)
		}
	case Release:
	default:
		return model.Errorf(model.ErrInvalidInput, "a lease step is acquire, renew or release, got '%s'", step)
	}
	return nil
}
