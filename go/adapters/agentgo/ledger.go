package agentgo

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// Profile is the profile the adapter's runs publish in their capabilities.
const Profile = "agentgo"

// Agent is the agent name on the events an adapter writes, unless Options names another.
const Agent = "agentgo"

// Options configures a Ledger.
type Options struct {
	// Agent names the agent on the events its runs write ("": Agent).
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

// Ledger records AgentGo runs of one agent in one session of a store. Install its
// middlewares and a run's committer on the agent, and run the agent under run.Context (ag is
// AgentGo's package, agentledger this one):
//
//	lg, _ := agentledger.New(st, "task-42", agentledger.Options{Model: "gpt-5"})
//	run, _ := lg.Start(ctx, agentledger.RunOptions{RunID: "r1"})
//	a := ag.NewAgent(
//		ag.WithModelMiddlewares(lg.ModelMiddleware()),
//		ag.WithToolMiddlewares(lg.ToolMiddleware()),
//		ag.WithMessageCommitter(run.CommitMessage))
//	err := a.Run(run.Context(ctx), prompt)
//	err = errors.Join(err, run.Finish(ctx, err))
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
		name = Agent
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
	// Resume continues the run's record after a crash: Messages gives the conversation back,
	// a step recorded before returns its recorded outcome, and a call a crash left unresolved
	// stops the run unless its tool is safe to replay. Without it, a run id used before starts
	// a new execution of its own (an incarnation), whose conversation starts empty.
	Resume bool
	// LeaseWait is how long to wait for a crashed holder's lease to expire.
	LeaseWait time.Duration
}

// Start starts (or, with opts.Resume, resumes) a recorded run. Started inside a tool call that
// a ledger run records, as a subagent's run is, it is that run's child: its run.started
// follows from the call's tool_call and names the parent run.
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
	r := &Run{ledger: l, run: run, native: native, owner: rand.Text()[:12], started: run.Version()}
	if r.said, err = l.log.StreamVersion(ctx, native); err != nil {
		return nil, errors.Join(err, run.Finish(ctx, err))
	}
	return r, nil
}

// childRunID is the run id a call's subagent takes: the parent's run and the call's id, or
// a new id when that does not name both of a run's streams.
func childRunID(session string, call inflight) string {
	id := call.run.ID() + "." + call.callID
	for _, name := range []string{"run-" + id, NativePrefix + id} {
		if _, err := model.NewStreamID(session, name); err != nil {
			return ""
		}
	}
	return id
}

// Run is one recorded AgentGo run. Its middlewares find it in the context (Context), its
// committer is CommitMessage; a run's tools may run concurrently.
type Run struct {
	ledger *Ledger
	native model.StreamID

	mu      sync.Mutex // one writer at a time on the run's streams
	run     *agent.Run
	owner   string // this process's name in the framework stream's append ids
	started int64  // the run's version once started: this start's name in a model step asked again
	said    int64  // the framework stream's version
	// answered is the event id of the newest model call's tool_call, which the reply's
	// message follows from ("": none since the last reply was committed).
	answered string
	// halted is why the run may not go on (a call unresolved, an outcome not recorded): AgentGo
	// makes a middleware's error a tool result, so the committer refuses the next message.
	halted error
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

// Context returns ctx with the run in it, for the adapter's middlewares: run the agent (and
// resume it) with the context this returns.
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

// Finish records the run's end: ok, or error with err (nil: ok), and lets its lease go.
func (r *Run) Finish(ctx context.Context, err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		err = r.halted
	}
	return r.run.Finish(ctx, err)
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

// toolStep is a tool call's step: its turn and its call's id, which survive retries and
// resumes (a provider's call ids are unique within a reply, not always across replies).
func toolStep(r *Run, e Execution) string {
	return fmt.Sprintf("%s/tool/t%d/%s", r.ID(), e.TurnIndex, e.ID)
}
