package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// lifecycle is the mutation kinds a run writes of its own life, each time it starts or ends.
var lifecycle = []string{"run.started", "run.resumed", "run.finished", "tool.declared"}

// IsLifecycle says whether a mutation's kind is one a run writes of its own life, each time
// it starts or ends (run.started, run.resumed, run.finished, tool.declared): never replayed,
// and left out of Recovery.Events.
func IsLifecycle(kind string) bool { return slices.Contains(lifecycle, kind) }

// Profile is the profile a recorder publishes in its capabilities, unless told otherwise.
const Profile = "go-loop"

// The statuses of a tool_result.
const (
	StatusOK    = "ok"
	StatusError = "error"
)

// notSaid is what the ledger sets on an event, or the run itself: not what the agent said.
var notSaid = []string{"event_id", "agent", "run_id", "parents"}

// RecorderOptions configures a Recorder.
type RecorderOptions struct {
	// Telemetry makes the recorder best effort: writes that fail are logged and the work goes
	// on, and its capabilities say so (no recovery is claimed; a run may not resume).
	Telemetry bool
	// LeaseTTL is how long a run stays alive without renewal (0: DefaultLeaseTTL); a run
	// renews it every third of that.
	LeaseTTL time.Duration
	// Profile names the loop in the capabilities each run records (""; Profile).
	Profile string
	// Logger receives what a run cannot say through an error: a lease it could not renew, a
	// telemetry write let go. Nil logs nothing.
	Logger *slog.Logger
}

// Recorder records runs of one agent in one session, writing the events the Python package's
// recorder writes, to the same streams with the same append ids, so that the reconciler and
// `ledger-bus resolve` work on a Go run as on a Python one. Its guarantees:
//
//   - requested before called: a tool's tool_call is committed before the tool runs, and when
//     that write fails the tool does not run (ErrRequestNotRecorded);
//   - outcomes: the tool_result (ok, or error with what the tool returned) follows, linked to
//     its call;
//   - liveness: a run holds a lease, renewed in the background, so a crashed run is
//     recognisable;
//   - fencing: every write of a run is made under its lease (the holding's model.Fence), so
//     a process that lost it (stopped past its TTL while another process took the run over)
//     writes nothing more, whatever it had on its way: the store refuses it with
//     ErrLeaseLost, atomically, and the run is lost (no more writes, no run.finished);
//   - recovery: a run resumed from its stream returns recorded results instead of calling
//     again, and stops at a call requested and never finished unless its tool is safe to
//     replay (ErrUnresolvedAttempt).
//
// Each run writes its own stream, run-<run id>, with expected versions: one writer per stream,
// so a second process writing the same run is refused instead of interleaving. A Recorder is
// safe for concurrent use; each Run is used by one goroutine at a time.
type Recorder struct {
	log      store.Log
	attempts store.Attempts
	session  string
	agent    string
	durable  bool
	leaseTTL time.Duration
	profile  string
	logger   *slog.Logger
}

// NewRecorder returns a recorder of agent's runs in session. The store must keep leases and
// open attempts (store.Attempts) besides its log: an error of kind model.ErrUnsupported when
// it does not.
func NewRecorder(s store.Log, session, agent string, opts RecorderOptions) (*Recorder, error) {
	attempts, err := store.Need[store.Attempts](s)
	if err != nil {
		return nil, err
	}
	if err := model.CheckName(session, "session id"); err != nil {
		return nil, err
	}
	if agent == "" {
		return nil, model.Errorf(model.ErrInvalidInput, "an agent's name is a non-empty string")
	}
	r := &Recorder{log: s, attempts: attempts, session: session, agent: agent,
		durable: !opts.Telemetry, leaseTTL: opts.LeaseTTL, profile: opts.Profile, logger: opts.Logger}
	if r.leaseTTL <= 0 {
		r.leaseTTL = DefaultLeaseTTL
	}
	if r.leaseTTL < 3*time.Millisecond {
		return nil, model.Errorf(model.ErrInvalidInput, "a lease's ttl is at least 3ms, got %s", r.leaseTTL)
	}
	if r.profile == "" {
		r.profile = Profile
	}
	if r.logger == nil {
		r.logger = slog.New(slog.DiscardHandler)
	}
	return r, nil
}

// Session is the session the recorder writes.
func (r *Recorder) Session() string { return r.session }

// Agent is the agent named on every event the recorder writes.
func (r *Recorder) Agent() string { return r.agent }

// Capabilities is what the recorder guarantees; each run records it in its run.started.
func (r *Recorder) Capabilities() Capabilities {
	if r.durable {
		return Capabilities{r.profile, Strict, Strict, Strict}
	}
	return Capabilities{r.profile, BestEffort, BestEffort, Unsupported}
}

// RunOptions says which run to start and how.
type RunOptions struct {
	// RunID names the run ("": a new random id). Its events go to the stream run-<RunID>.
	RunID string
	// Parents are the event ids the run follows from (a delegation's call).
	Parents []string
	// Resume continues the run's stream: recorded results are returned instead of calling
	// tools again.
	Resume bool
	// LeaseWait is how long to wait for a crashed holder's lease to expire.
	LeaseWait time.Duration
	// Acknowledged is the run's version as last seen acknowledged (kept by the caller with its
	// own state): a resume that finds a shorter stream is refused with HistoryRewound instead
	// of calling again what a failover made the ledger forget.
	Acknowledged int64
	// Fields are more fields of the run's run.started (or run.resumed).
	Fields map[string]any
}

// Recovery is what a loop rebuilds its state from after a crash: the newest snapshot the run
// took (nil: none) and the run's events after it, in order, its own starts and ends left out.
type Recovery struct {
	State  map[string]any
	Events []model.RecordedEvent
}

// Start starts a run: its lease taken (waiting up to opts.LeaseWait for a crashed holder's to
// expire, else an error of kind ErrRunHeld), kept renewed until Finish or Drop, its start
// recorded. End it with Finish. ctx bounds Start alone: the renewals outlive it.
func (r *Recorder) Start(ctx context.Context, opts RunOptions) (*Run, error) {
	if opts.Resume && !r.durable {
		return nil, model.Errorf(model.ErrInvalidInput, "a telemetry-only recorder cannot resume: it claims no recovery")
	}
	run, err := r.newRun(opts.RunID, opts.Resume)
	if err != nil {
		return nil, err
	}
	run.parents, run.leaseWait, run.fields = opts.Parents, opts.LeaseWait, opts.Fields
	run.version = opts.Acknowledged
	if err := run.acquire(ctx); err != nil {
		return nil, err
	}
	run.startRenewing(ctx)
	if err := run.begin(ctx); err != nil {
		return nil, errors.Join(err, run.letGo(ctx))
	}
	return run, nil
}

// Run runs work inside a run: started before, finished after, with status ok, or error with
// what work returned (or the panic it raised, raised again once recorded).
func (r *Recorder) Run(ctx context.Context, opts RunOptions, work func(ctx context.Context, run *Run) error) (err error) {
	run, err := r.Start(ctx, opts)
	if err != nil {
		return err
	}
	finished := false
	defer func() {
		if finished {
			return
		}
		// work panicked, or ended its goroutine (runtime.Goexit, as t.FailNow does).
		p := recover()
		if p == nil {
			_ = run.Finish(ctx, errors.New("the run's goroutine ended without returning"))
			return
		}
		_ = run.Finish(ctx, fmt.Errorf("panic: %v", p))
		panic(p)
	}()
	err = work(ctx, run)
	finished = true
	if ferr := run.Finish(ctx, err); ferr != nil {
		if err != nil {
			return errors.Join(err, ferr)
		}
		return ferr
	}
	return err
}

// Recover returns the newest snapshot of the run runID and the events after it, read without
// taking the run's lease (Run.Recovered is the same, for a resumed run).
func (r *Recorder) Recover(ctx context.Context, runID string) (Recovery, error) {
	run, err := r.newRun(runID, true)
	if err != nil {
		return Recovery{}, err
	}
	if err := run.load(ctx); err != nil {
		return Recovery{}, err
	}
	return run.Recovered(), nil
}

func (r *Recorder) newRun(id string, resume bool) (*Run, error) {
	if id == "" {
		id = shortID()
	}
	stream, err := model.NewStreamID(r.session, "run-"+id)
	if err != nil {
		return nil, err
	}
	native, err := model.NewStreamID(r.session, "native-"+id)
	if err != nil {
		return nil, err
	}
	return &Run{rec: r, id: id, stream: stream, native: native, resume: resume,
		owner: strings.ReplaceAll(uuid.NewString(), "-", ""), declared: map[string]bool{},
		history: newHistory(), incarnation: 1}, nil
}

// shortID is a new run id: 12 hex digits, as the Python recorder makes them.
func shortID() string { return strings.ReplaceAll(uuid.NewString(), "-", "")[:12] }

// history is a run's stream as read on resume: what each step asked and got.
type history struct {
	version  int64
	attempts map[string][]model.RecordedEvent // step -> its tool_calls, in order
	results  map[string]model.RecordedEvent   // attempt -> its tool_result
	said     []model.RecordedEvent            // messages and mutations, in order
	// checkpoint is the newest snapshot's state, checkpointVersion the run's version when it
	// was taken.
	checkpoint        map[string]any
	checkpointVersion int64
	events            []model.RecordedEvent // the incarnation's, in order
}

func newHistory() history {
	return history{attempts: map[string][]model.RecordedEvent{}, results: map[string]model.RecordedEvent{}}
}

// Run is one semantic execution by an agent; its events go to the stream run-<run id>. Make
// one with Recorder.Start or Recorder.Run. A Run is used by one goroutine at a time.
type Run struct {
	rec       *Recorder
	id        string
	stream    model.StreamID
	native    model.StreamID
	parents   []string
	resume    bool
	leaseWait time.Duration
	fields    map[string]any
	owner     string
	// fence is the run's lease as this execution holds it, once taken: every write names it,
	// so that one made after the holding is over (a process stopped past its TTL) is refused.
	fence model.Fence

	version     int64
	history     history
	calls       int
	said        int
	checkpoints int
	declared    map[string]bool
	// incarnation is the version of this incarnation's run.started: 1 for a run id used once.
	// A run id used again starts a new incarnation, and its attempt ids carry it, so that no
	// attempt id is recorded twice in a stream (a flag or a resolution names one attempt).
	incarnation int64
	finished    bool

	lost      atomic.Bool
	stopOnce  sync.Once
	stop      chan struct{}
	renewDone chan struct{}
}

// ID is the run's id.
func (run *Run) ID() string { return run.id }

// Stream is the stream the run writes, run-<run id>.
func (run *Run) Stream() model.StreamID { return run.stream }

// Version is the run's stream version: what it last wrote, or found. Keep it with the loop's
// own state to pass back as RunOptions.Acknowledged.
func (run *Run) Version() int64 { return run.version }

// Incarnation is the version of the run.started this execution of the run id began with (1
// for a run id used once): what tells a later execution's records from an earlier one's.
func (run *Run) Incarnation() int64 { return run.incarnation }

// LeaseLost says whether the run lost its lease (it expired, or passed to another process):
// it may write nothing more, and neither may a loop on its behalf.
func (run *Run) LeaseLost() bool { return run.lost.Load() }

// LeaseName is the name of the run's lease, run-<run id>, as the reconciler looks for it.
func (run *Run) LeaseName() string { return "run-" + run.id }

// Fence is the run's lease as this execution holds it: the lease, this execution's owner
// token and the token its holding drew. Every write of the run names it; so does
// AppendUnderLease.
func (run *Run) Fence() model.Fence { return run.fence }

// -- lifetime -----------------------------------------------------------------------------

// acquire takes the run's lease, waiting up to leaseWait for a crashed holder's to expire.
func (run *Run) acquire(ctx context.Context) error {
	r := run.rec
	deadline := time.Now().Add(run.leaseWait)
	pause := min(200*time.Millisecond, r.leaseTTL/5)
	for {
		token, err := r.attempts.Lease(ctx, store.Acquire, r.session, run.LeaseName(), run.owner, r.leaseTTL)
		if err != nil {
			return err
		}
		if token > 0 {
			run.fence = model.Fence{Lease: run.LeaseName(), Owner: run.owner, Token: token}
			return nil
		}
		if !time.Now().Before(deadline) {
			return newError(ErrRunHeld, nil, "run %s is held by another live process", run.id)
		}
		if err := sleep(ctx, pause); err != nil {
			return err
		}
	}
}

// startRenewing renews the lease every third of its ttl until stopRenewing, in a goroutine
// whose context keeps ctx's values but not its end: the lease lives as long as the run.
func (run *Run) startRenewing(ctx context.Context) {
	run.stop, run.renewDone = make(chan struct{}), make(chan struct{})
	base := context.WithoutCancel(ctx)
	r := run.rec
	go func() {
		defer close(run.renewDone)
		ticker := time.NewTicker(r.leaseTTL / 3)
		defer ticker.Stop()
		for {
			select {
			case <-run.stop:
				return
			case <-ticker.C:
			}
			ctx, cancel := context.WithTimeout(base, r.leaseTTL)
			token, err := r.attempts.Lease(ctx, store.Renew, r.session, run.LeaseName(), run.owner, r.leaseTTL)
			cancel()
			switch {
			case err != nil:
				// Could not reach the store: tried again at the next renewal.
				r.logger.Warn("run could not renew its lease; retrying", "run", run.id, "err", err)
			case token != run.fence.Token:
				// 0: expired, or another's now. Another token than the run's own (its fences
				// lost from under a held lease): the store would refuse its writes anyway.
				r.logger.Error("run lost its lease", "run", run.id)
				run.lost.Store(true)
				return
			}
		}
	}()
}

// stopRenewing stops the renewals and waits for the one under way.
func (run *Run) stopRenewing() {
	run.stopOnce.Do(func() {
		if run.stop != nil {
			close(run.stop)
			<-run.renewDone
		}
	})
}

// letGo stops renewing the lease and releases it. The release is cleanup, done even when ctx
// is done already.
func (run *Run) letGo(ctx context.Context) error {
	run.stopRenewing()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), run.rec.leaseTTL)
	defer cancel()
	r := run.rec
	_, err := r.attempts.Lease(ctx, store.Release, r.session, run.LeaseName(), run.owner, 0)
	return err
}

// begin, with the lease held, reads the history to resume from, then records the start.
func (run *Run) begin(ctx context.Context) error {
	if run.resume {
		if err := run.load(ctx); err != nil {
			return err
		}
	} else {
		version, err := run.rec.log.StreamVersion(ctx, run.stream)
		if err != nil {
			return err
		}
		run.version = version
		run.incarnation = version + 1 // the version its run.started will take
	}
	kind := "run.started"
	if run.resume {
		kind = "run.resumed"
	}
	event := model.Event{"type": model.TypeMutation, "kind": kind,
		"capabilities": run.rec.Capabilities().Fields()}
	for name, value := range run.fields {
		event[name] = value
	}
	_, err := run.write(ctx, event, run.parents)
	return err
}

// Finish records how the run ended, ok when err is nil, else error with err's text, and
// releases the lease. A run that lost its lease records nothing, as it may not write: it
// returns an error of kind ErrLeaseLost unless err is one already. A second Finish does
// nothing.
func (run *Run) Finish(ctx context.Context, err error) error {
	if run.finished {
		return nil
	}
	run.finished = true
	var werr error
	if !errors.Is(err, ErrLeaseLost) {
		event := model.Event{"type": model.TypeMutation, "kind": "run.finished", "status": StatusOK}
		if err != nil {
			event["status"] = StatusError
			event["error"] = errorName(err) + ": " + err.Error()
		}
		// How the run ended is recorded even when ctx ended it, as the lease's release is.
		_, werr = run.write(context.WithoutCancel(ctx), event, nil)
	}
	return errors.Join(werr, run.letGo(ctx))
}

// Drop stops renewing the lease and leaves it to expire, writing nothing: the run as a killed
// process leaves it, its open call for the reconciler to flag. The run writes nothing more.
func (run *Run) Drop() {
	run.stopRenewing()
	run.lost.Store(true)
	run.finished = true
}

// -- writing ------------------------------------------------------------------------------

// write appends one event to the run's stream under the run's lease, with the run's agent and
// id, and returns its event id.
func (run *Run) write(ctx context.Context, event model.Event, parents []string) (string, error) {
	r := run.rec
	full := make(model.Event, len(event)+3)
	full["agent"], full["run_id"] = r.agent, run.id
	for name, value := range event {
		full[name] = value
	}
	if len(parents) > 0 {
		full["parents"] = parents
	}
	appendID := fmt.Sprintf("%s:%d", run.id, run.version+1)
	// Known before the write: the ledger derives it from the append.
	eventID, _ := full["event_id"].(string)
	if eventID == "" {
		eventID = model.DeriveEventID(run.stream, appendID, 0)
	}
	result, err := run.AppendUnderLease(ctx, run.stream, run.version, appendID, []model.Event{full})
	if err != nil {
		var unconfirmed *model.DurabilityNotConfirmedError
		if errors.As(err, &unconfirmed) {
			// The primary has it: the run's next event follows it, whatever becomes of this one.
			run.version = unconfirmed.Result.LastVersion
			if r.durable {
				return "", err
			}
			return eventID, nil
		}
		// A lost lease stops even a telemetry run's writes: it is no longer this run's record.
		if !r.durable && errors.Is(err, model.ErrLedger) && !errors.Is(err, ErrLeaseLost) {
			r.logger.Warn("telemetry write failed; going on", "run", run.id, "what", what(full), "err", err)
			return eventID, nil
		}
		return "", err
	}
	run.version = result.LastVersion
	return eventID, nil
}

// AppendUnderLease appends events to a stream of the run's session under the run's lease, as
// every write of the run is made: a framework's own record of the run beside the run's
// stream (an adapter's conversation, a snapshot). Once the run has lost its lease it writes
// nothing and returns an error of kind ErrLeaseLost; so it does when the store refuses the
// append because the holding is over (a *model.LeaseLostError: the store checks the fence
// before anything else, so a process stopped past its lease is told that, not a conflict with
// what the run's next holder wrote under the same append_id), and the run is lost from then
// on: whatever else this execution had on its way is refused too.
func (run *Run) AppendUnderLease(ctx context.Context, stream model.StreamID, expected int64, appendID string, events []model.Event) (model.AppendResult, error) {
	if run.lost.Load() {
		return model.AppendResult{}, newError(ErrLeaseLost, nil, "run %s lost its lease; it may not write any more", run.id)
	}
	result, err := run.rec.log.Append(ctx, stream, expected, appendID, events, store.WithFence(run.fence))
	if errors.Is(err, ErrLeaseLost) && !run.lost.Swap(true) {
		run.rec.logger.Error("run lost its lease: a write was refused", "run", run.id, "err", err)
	}
	return result, err
}

// what names an event in a log line: a mutation by its kind, another by its type.
func what(event model.Event) string {
	if kind, ok := event["kind"].(string); ok && event["type"] == model.TypeMutation {
		return kind
	}
	text, _ := event["type"].(string)
	return text
}

// Message records that the agent said body; it returns the event id.
func (run *Run) Message(ctx context.Context, body string) (string, error) {
	return run.Say(ctx, model.Event{"type": model.TypeMessage, "body": body})
}

// Mutate records a change of session state: the log, not a side field, is its source of
// truth. It returns the event id.
func (run *Run) Mutate(ctx context.Context, kind string, fields map[string]any) (string, error) {
	event := make(model.Event, len(fields)+2)
	for name, value := range fields {
		event[name] = value
	}
	event["type"], event["kind"] = model.TypeMutation, kind
	return run.Say(ctx, event)
}

// Say records the run's next message or mutation, given whole (a message with a step_id, say),
// unless it is a resumed run's replay of one: the n-th that the run says is the n-th it said
// before the crash, and when that one is recorded with the same content, its event id is
// returned and nothing is written, as a call recorded before is not called again. A run that
// says something else at that point has gone another way, and what it says now is written.
func (run *Run) Say(ctx context.Context, event model.Event) (string, error) {
	position := run.said
	run.said++
	if position < len(run.history.said) {
		before := run.history.said[position]
		if sameSaid(before.Fields, event) {
			return before.EventID(), nil
		}
	}
	return run.write(ctx, event, nil)
}

// sameSaid compares what two events say, as canonical JSON: whatever the order their fields
// were given in, and whatever Go types spell the same JSON.
func sameSaid(recorded, event model.Event) bool {
	a, errA := model.Canonical(saidOf(recorded))
	b, errB := model.Canonical(saidOf(event))
	return errA == nil && errB == nil && string(a) == string(b)
}

func saidOf(fields model.Event) map[string]any {
	out := make(map[string]any, len(fields))
	for name, value := range fields {
		out[name] = value
	}
	for _, name := range notSaid {
		delete(out, name)
	}
	return out
}

// Snapshot keeps the loop's state (JSON), whole, in the run's own native stream
// (native-<run id>): on resume, Recovered gives the newest snapshot and the run's events after
// it ("snapshot plus tail replay"), so a loop rebuilds its state without replaying its whole
// history.
func (run *Run) Snapshot(ctx context.Context, state map[string]any) error {
	// Numbered within the run's version, so that two checkpoints with nothing written in
	// between are two appends, not one append_id used for two states.
	run.checkpoints++
	appendID := fmt.Sprintf("%s:native:%d:%d", run.id, run.version, run.checkpoints)
	event := model.Event{"type": model.TypeMutation, "agent": run.rec.agent, "run_id": run.id,
		"kind": "native.checkpoint", "run_version": run.version, "state": state}
	_, err := run.AppendUnderLease(ctx, run.native, model.AnyVersion, appendID, []model.Event{event})
	return err
}

// Recovered is, on resume, the newest snapshot and the events this run recorded after it.
func (run *Run) Recovered() Recovery {
	h := run.history
	var after []model.RecordedEvent
	for _, event := range h.events {
		if event.Version > h.checkpointVersion {
			after = append(after, event)
		}
	}
	return Recovery{State: h.checkpoint, Events: after}
}

// -- resuming -----------------------------------------------------------------------------

// load reads the run's history, to resume from.
func (run *Run) load(ctx context.Context) error {
	log := run.rec.log
	events, err := log.ReadStream(ctx, run.stream, store.ReadStreamOptions{})
	if err != nil {
		return err
	}
	h := newHistory()
	for _, event := range events {
		h.version = event.Version
		kind, _ := event.Fields["kind"].(string)
		typ := event.Type()
		if typ == model.TypeMutation && kind == "run.started" {
			// An earlier incarnation of this run id is another execution: what its steps got is
			// not this one's to replay.
			h = newHistory()
			h.version = event.Version
			run.incarnation = event.Version
		}
		ownLife := typ == model.TypeMutation && IsLifecycle(kind)
		if !ownLife {
			h.events = append(h.events, event)
		}
		switch {
		case typ == model.TypeToolCall:
			step := fieldText(event.Fields, "step_id")
			h.attempts[step] = append(h.attempts[step], event)
		case typ == model.TypeToolResult:
			h.results[fieldText(event.Fields, "attempt_id")] = event
		case !IsLifecycle(kind):
			h.said = append(h.said, event)
		}
	}
	// Only the last checkpoint counts; each holds a whole state, so the others are not read.
	last, err := log.StreamVersion(ctx, run.native)
	if err != nil {
		return err
	}
	if last > 0 {
		found, err := log.ReadStream(ctx, run.native, store.ReadStreamOptions{After: last - 1})
		if err != nil {
			return err
		}
		if len(found) > 0 {
			checkpoint := found[len(found)-1]
			takenAt := integer(checkpoint.Fields["run_version"])
			state, _ := checkpoint.Fields["state"].(map[string]any)
			if takenAt >= run.incarnation { // not an earlier run's under this id
				h.checkpoint, h.checkpointVersion = state, takenAt
			}
		}
	}
	if h.version < run.version {
		return &model.VersionConflictError{Stream: run.stream, Expected: run.version, Actual: h.version, Rewound: true}
	}
	run.history = h
	run.version = h.version
	return nil
}

// fieldText is a field as text, as the Python recorder keys its history by str(value).
func fieldText(fields model.Event, name string) string {
	switch v := fields[name].(type) {
	case string:
		return v
	case nil:
		return "None"
	default:
		return fmt.Sprint(v)
	}
}

// integer is a recorded number as an int64: 0 when it is none.
func integer(v any) int64 {
	switch n := v.(type) {
	case int64:
		return n
	case float64:
		return int64(n)
	case int:
		return int64(n)
	}
	return 0
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}
