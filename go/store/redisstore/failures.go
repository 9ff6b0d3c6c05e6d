package redisstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ledger-bus/ledger-bus/go/model"
)

// What a Redis failure means, as the Python package judges it (ledger_bus/store/redis/
// connection.py): a reply that retrying will not change becomes a ledger error at once; a lost
// connection or a "not now" reply is tried again until the store's timeout.

// transientReplies are the replies that mean "not now" rather than "never": a failover, a
// loading replica, a busy script, a cluster moving slots.
var transientReplies = []string{"LOADING", "BUSY", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN"}

// slotMoved is a MOVED or ASK reply to a call a cluster store pinned to one node (an append
// that waits for its durability): the slot moved since the store read the slot map, and the
// next try asks the cluster again. (A store on one server that gets MOVED is on a cluster node
// by mistake: that is refused.)
type slotMoved struct{ error }

func (e slotMoved) Unwrap() error { return e.error }

// replyError is an error the server replied, as opposed to a failure to get a reply.
func replyError(err error) (redis.Error, bool) {
	var reply redis.Error
	if errors.As(err, &reply) && !errors.Is(err, redis.Nil) {
		return reply, true
	}
	return nil, false
}

// transient reports whether err is worth trying again: a lost connection, a timeout, a node
// gone, or a reply of transientReplies.
func transient(err error) bool {
	switch {
	case err == nil, errors.Is(err, redis.Nil), errors.Is(err, redis.ErrClosed):
		return false
	case errors.Is(err, model.ErrLedger):
		return false
	case errors.As(err, new(slotMoved)):
		return true
	}
	if reply, ok := replyError(err); ok {
		text := reply.Error()
		for _, word := range transientReplies {
			if strings.HasPrefix(text, word+" ") || text == word {
				return true
			}
		}
		// Too many clients for now: a connection refused, as the Python package has it.
		return strings.Contains(text, "max number of clients reached")
	}
	// A lost connection, a timeout, a node gone; a context's error too (go-redis wraps a dial
	// that timed out in one): whether the caller's context is done, do asks first.
	return true
}

// fail is the ledger's error for a go-redis error (nil stays nil): a reply the server refuses
// with is model.ErrBackendRefused (credentials, ACL, memory full, a node not in cluster mode,
// any other), a failure to get a reply model.ErrBackendUnavailable. A ledger error, a
// context's error and redis.Nil (a reply of nothing, which callers test for) come back
// unchanged.
func (s *Store) fail(err error) error {
	return s.failing(err, "")
}

// failing is fail, the refused command named by what ("XRANGE lb:{s}:log"), when known.
func (s *Store) failing(err error, what string) error {
	switch {
	case err == nil, errors.Is(err, redis.Nil), errors.Is(err, model.ErrLedger):
		return err
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, redis.ErrClosed):
		return &model.Error{Kind: model.ErrBackendUnavailable, Msg: "the redis store is closed", Cause: err}
	}
	reply, ok := replyError(err)
	if !ok || transient(err) {
		return &model.Error{Kind: model.ErrBackendUnavailable, Msg: "redis did not answer: " + err.Error(), Cause: err}
	}
	return refusal(reply, what)
}

// refusal is the ledger's error for a reply that retrying will not change: always of kind
// model.ErrBackendRefused, saying what was refused.
func refusal(reply redis.Error, what string) error {
	text := reply.Error()
	on := ""
	if what != "" {
		on = " (" + what + ")"
	}
	var msg string
	switch {
	case strings.HasPrefix(text, "WRONGPASS"), strings.HasPrefix(text, "NOAUTH"),
		strings.Contains(text, "invalid username-password pair"):
		msg = "redis refused the credentials: " + text
	case strings.HasPrefix(text, "NOPERM"), strings.Contains(text, "can't run this command"),
		strings.Contains(text, "can't access at least one of the keys"):
		msg = "redis refused the permission (ACL)" + on + ": " + text
	case strings.HasPrefix(text, "OOM"), strings.Contains(text, "used memory > 'maxmemory'"):
		msg = "Redis memory is full (maxmemory reached)" + on + ": " + text
	case strings.Contains(text, "cluster support disabled"):
		msg = "the server is not a Redis Cluster node; use redis:// for a single server: " + text
	case strings.Contains(text, "DB index is out of range"):
		msg = "redis has no such database: " + text
	default:
		msg = "redis refused the command" + on + ": " + text
	}
	return &model.Error{Kind: model.ErrBackendRefused, Msg: msg, Cause: reply}
}

// do runs call until it succeeds, fails for good, or the store's timeout has passed since the
// first try (then an error of kind model.ErrBackendUnavailable), pausing with backoff between
// tries. Each try is a fresh call: an append tried again is the same append_id with the same
// content, which the script deduplicates. what names the command for a refusal ("XRANGE
// lb:{s}:log"). A done ctx ends it with ctx's error.
func (s *Store) do(ctx context.Context, what string, call func(ctx context.Context) error) error {
	deadline := time.Now().Add(s.timeout)
	delay := 20 * time.Millisecond
	for {
		err := call(ctx)
		if err != nil && ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil || !transient(err) {
			return s.failing(err, what)
		}
		if time.Now().Add(delay).After(deadline) {
			return &model.Error{
				Kind:  model.ErrBackendUnavailable,
				Msg:   "redis unreachable for " + s.timeout.String() + ": " + err.Error(),
				Cause: err,
			}
		}
		if err := sleep(ctx, delay); err != nil {
			return err
		}
		delay = min(delay*2, 500*time.Millisecond)
	}
}

// sleep waits d, or until ctx is done (its error).
func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// bestEffort runs call once, its failure ignored: bookkeeping after a committed append (the
// session indexes) never turns the append into an error (spec section 4); the next append
// tries again, and `ledger-bus sessions --rebuild` repairs what is left.
func bestEffort(ctx context.Context, call func(ctx context.Context) error) bool {
	return call(ctx) == nil
}
