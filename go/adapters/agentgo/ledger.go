package agentgo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	ag "github.com/compforge/agentgo"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// Profile is the profile the adapter's runs publish in their capabilities.
const Profile = "agentgo"

// DefaultAgent is the agent name on the events an adapter writes, unless Options names another.
const DefaultAgent = "agentgo"

// Options configures a Ledger.
type Options struct {
	// Agent names the agent on the events its runs write ("": DefaultAgent).
	Agent string
	// Model names the model the agent's ChatModel calls, recorded with each model call; a
	// reply's own Usage.Model, when the provider reports it, is recorded as the model that
	// answered.
	Model string
	// SafeToReplay names the tools that may run twice: a call of one that a crash left
	// unresolved runs again on resume. Any other tool's unresolved call stops the resumed run.
	SafeToReplay []string
	// LeaseTTL is how long a run stays alive without renewal (0: agent.DefaultLeaseTTL): a
	// killed process's open call is flagged by the reconciler once its lease is gone.
	LeaseTTL time.Duration
}

// Ledger records the AgentGo runs of one agent in one session of a store. Its middlewares
// serve every agent of the process (they find their run in the context); each run gives its
// agent a message committer and the restore and outcome hooks (see the package doc).
//
// A Ledger is safe for concurrent use by the runs of many goroutines.
type Ledger struct {
	rec     *agent.Recorder
	log     store.Log
	session string
	model   string
	safe    []string
}

// New returns a Ledger of the agent's runs in session. The store must keep leases and open
// attempts (store.Attempts) besides its log.
func New(s store.Log, session string, opts Options) (*Ledger, error) {
	name := opts.Agent
	if name == "" {
		name = DefaultAgent
	}
	rec, err := agent.NewRecorder(s, session, name, agent.RecorderOptions{LeaseTTL: opts.LeaseTTL, Profile: Profile})
	if err != nil {
		return nil, err
	}
	return &Ledger{rec: rec, log: s, session: session, model: opts.Model, safe: slices.Clone(opts.SafeToReplay)}, nil
}

// RunOptions says which run to start.
type RunOptions struct {
	// RunID names the run. "" makes one: inside a tool call (a subagent's run), derived from
	// the call, so that a call run again (a tool safe to replay) starts its child run id
	// again; elsewhere a new one.
	RunID string
	// Resume continues the run's record after a crash: the restore hook gives AgentGo the
	// conversation and progress back from the ledger, and the agent goes on with Continue.
	// Without it, a run id used before starts a new execution of its own (an incarnation),
	// whose conversation starts from the agent's own.
	Resume bool
	// LeaseWait is how long to wait for a crashed holder's lease to expire.
	LeaseWait time.Duration
}

// Start starts (or, with opts.Resume, resumes) a recorded run: one AgentGo run, from its
// Prompt (or, resumed, its Continue) to its end. Started inside a tool call that a ledger run
// records, as a subagent's run is, it is that run's child: its run.started follows from the
// call's tool_call and names the parent run.
func (l *Ledger) Start(ctx context.Context, opts RunOptions) (*Run, error) {
	var parents []string
	fields := map[string]any{}
	if call, ok := ctx.Value(callKey{}).(inflight); ok {
		parents = []string{call.attempt.CallID}
		fields["parent_run"] = call.run.ID()
		fields["delegated_by"] = call.attempt.Tool
		if opts.RunID == "" {
			opts.RunID = childRunID(l.session, call)
		}
	}
	if opts.RunID != "" {
		// Both of the run's streams are named before anything is written.
		if _, err := model.NewStreamID(l.session, NativePrefix+opts.RunID); err != nil {
			return nil, err
		}
	}
	run, err := l.rec.Start(ctx, agent.RunOptions{RunID: opts.RunID, Parents: parents, Resume: opts.Resume,
		LeaseWait: opts.LeaseWait, Fields: fields})
	if err != nil {
		return nil, err
	}
	native, err := model.NewStreamID(l.session, NativePrefix+run.ID())
	if err != nil {
		return nil, errors.Join(err, run.Finish(ctx, err))
	}
	// The framework stream's appends are named by this process, so that a retry after a lost
	// reply deduplicates and another process's append at the same version is a conflict.
	r := &Run{ledger: l, run: run, native: native, owner: rand.Text()[:12], resumed: opts.Resume, begunModel: map[step]int{}}
	if r.version, err = l.log.StreamVersion(ctx, native); err != nil {
		return nil, errors.Join(err, run.Finish(ctx, err))
	}
	return r, nil
}

// childRunID is the run id a call's subagent takes: the parent's run, the call's turn and its
// id (a provider's call ids are unique within a reply only), or a new id when that does not
// name both of a run's streams.
func childRunID(session string, call inflight) string {
	id := fmt.Sprintf("%s.t%d.%s", call.run.ID(), call.turn, call.callID)
	for _, name := range []string{"run-" + id, NativePrefix + id} {
		if _, err := model.NewStreamID(session, name); err != nil {
			return ""
		}
	}
	return id
}

// Run is one recorded AgentGo run. Its agent's message committer is CommitMessage, its
// restore hook Restore (agentgo.WithBeforeRun), its outcome hook Ended (agentgo.WithAfterRun);
// the Ledger's middlewares find it in the context the agent runs with (Context).
type Run struct {
	ledger  *Ledger
	native  model.StreamID
	owner   string // this process's name in the framework stream's append ids
	resumed bool

	mu      sync.Mutex // one writer at a time on the run's streams
	run     *agent.Run
	version int64 // the framework stream's version
	// conversation is where the run's conversation stands: what the restore hook gave AgentGo
	// and what was committed since.
	conversation *conversation
	// answered is the event id of the newest model call's tool_call, which the reply's
	// message follows from ("": none since the last reply was committed).
	answered string
	// halted is why the run may not go on (a call unresolved, an outcome not recorded): AgentGo
	// makes a middleware's error a tool result, so the committer refuses the next message.
	halted error
	// outcome is how AgentGo's run ended, as the outcome hook saw it.
	outcome error
	// finished is the run's end as recorded, once Finish ran.
	finished *error
	// answeredBefore says the restore hook found the run's answer committed: a resumed run with
	// nothing left to do.
	answeredBefore bool
	// begunModel is, for each model call's step, the last attempt this process began.
	begunModel map[step]int
}

// ID is the run's id; its events are in the stream run-<ID>, its native messages in
// agentgo.<ID>.
func (r *Run) ID() string { return r.run.ID() }

// Fence is the run's lease as this process holds it (agent.Run.Fence): every write the
// adapter makes for the run names it, and so may a write of the application's own
// (store.WithFence).
func (r *Run) Fence() model.Fence { return r.run.Fence() }

// Agent is the agent's name on the run's events.
func (r *Run) Agent() string { return r.ledger.rec.Agent() }

type runKey struct{}

// Context returns ctx with the run in it, for the adapter's middlewares: run the agent
// (Prompt, or Continue when resumed) with the context this returns.
func (r *Run) Context(ctx context.Context) context.Context {
	return context.WithValue(ctx, runKey{}, r)
}

// runOf is the run a middleware is called for.
func runOf(ctx context.Context) (*Run, error) {
	r, ok := ctx.Value(runKey{}).(*Run)
	switch {
	case !ok:
		return nil, model.Errorf(model.ErrInvalidInput, "no ledger run in the context: run the agent with run.Context(ctx)")
	case r == nil: // inside a tool call: a subagent is not its parent's run
		return nil, model.Errorf(model.ErrInvalidInput, "a model or tool call inside a tool call needs a run of its own: "+
			"start it with Ledger.Start(ctx) and run the subagent with its Context")
	}
	return r, nil
}

// Ended is the run's outcome hook (agentgo.WithAfterRun): it keeps how AgentGo's run ended,
// which Finish records and returns. A run that ended short of its answer (its turns used up,
// say) without an error of AgentGo's ends in error too.
func (r *Run) Ended(_ context.Context, end ag.AfterRunContext) error {
	outcome := end.Err
	if outcome == nil && end.Summary.EndReason != ag.EndReasonStop {
		outcome = fmt.Errorf("AgentGo's run ended: %s", end.Summary.EndReason)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcome = outcome
	return nil
}

// Finish records the run's end and lets its lease go. The run ended in error when err is not
// nil, when AgentGo's run did (as the outcome hook saw it), or when the run halted; Finish
// returns that error (nil: the run ended well), joined with any error recording it. Called
// again, it returns the same. A resumed run whose answer was committed before the crash ends
// well: AgentGo's Continue refuses it with agentgo.ErrBadContinuation, there being nothing
// left to do.
func (r *Run) Finish(ctx context.Context, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.finished != nil {
		return *r.finished
	}
	if r.answeredBefore && errors.Is(err, ag.ErrBadContinuation) {
		err = nil
	}
	var causes []error
	for _, cause := range []error{err, r.outcome, r.halted} {
		if cause != nil && !slices.ContainsFunc(causes, func(c error) bool { return errors.Is(c, cause) }) {
			causes = append(causes, cause)
		}
	}
	outcome := errors.Join(causes...)
	outcome = errors.Join(outcome, r.run.Finish(ctx, outcome))
	r.finished = &outcome
	return outcome
}

// Drop leaves the run as a killed process would: nothing more written, the lease left to
// expire, an open call left for the reconciler.
func (r *Run) Drop() { r.run.Drop() }

// halt records why the run may not go on, and returns it.
func (r *Run) halt(err error) error {
	if r.halted == nil {
		r.halted = err
	}
	return err
}

// Halted is why the run stopped (nil: it did not): a call found unresolved on resume, or an
// outcome that could not be recorded.
func (r *Run) Halted() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.halted
}
