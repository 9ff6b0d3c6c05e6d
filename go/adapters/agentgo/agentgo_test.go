package agentgo_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/adapters/agentgo"
	"github.com/ledger-bus/ledger-bus/go/adapters/agentgo/internal/loop"
	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
	"github.com/ledger-bus/ledger-bus/go/store/memory"
)

// fixture is a scripted agent of two tools on a ledger: the model asks for lookup and deploy,
// then answers.
type fixture struct {
	st      *memory.Store
	lg      *agentgo.Ledger
	model   *loop.Scripted
	lookups atomic.Int32
	deploys atomic.Int32
	// deploy, when set, is what the deploy tool does (else it answers at once).
	deploy func(ctx context.Context) (json.RawMessage, error)
}

func newFixture(t *testing.T, st *memory.Store, opts agentgo.Options) *fixture {
	t.Helper()
	if opts.Model == "" {
		opts.Model = "scripted-1"
	}
	lg, err := agentgo.New(st, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{st: st, lg: lg, model: &loop.Scripted{Replies: []agentgo.Message{
		loop.Reply("", agentgo.Usage{Model: "scripted-1", Input: 120, Output: 30, CacheRead: 100}, "",
			[2]string{"lookup", `{"service": "api"}`}, [2]string{"deploy", `{"env": "prod", "replicas": 3}`}),
		loop.Reply("deployed api to prod", agentgo.Usage{Model: "scripted-1", Input: 200, Output: 12}, ""),
	}}}
}

func (f *fixture) agent(run *agentgo.Run) *loop.Agent {
	return &loop.Agent{
		Model: f.model,
		Tools: []loop.Tool{
			loop.Func{ToolName: "lookup", Fn: func(context.Context, json.RawMessage) (json.RawMessage, error) {
				f.lookups.Add(1)
				return json.RawMessage(`{"version":"1.4.2"}`), nil // a replay gives the same JSON value, compacted
			}},
			loop.Func{ToolName: "deploy", Fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
				f.deploys.Add(1)
				if f.deploy != nil {
					return f.deploy(ctx)
				}
				return json.RawMessage(`"deployed"`), nil
			}},
		},
		ModelMiddlewares: []agentgo.ModelMiddleware{f.lg.ModelMiddleware()},
		ToolMiddlewares:  []agentgo.ToolMiddleware{f.lg.ToolMiddleware()},
		Committer:        run.CommitMessage,
		MaxRetries:       2,
	}
}

// runToEnd runs the fixture's agent as the run r1, from the prompt to its answer.
func (f *fixture) runToEnd(t *testing.T) (*agentgo.Run, *loop.Agent) {
	t.Helper()
	ctx := context.Background()
	run, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	a := f.agent(run)
	err = a.Run(run.Context(ctx), "deploy the api")
	if err := errors.Join(err, run.Finish(ctx, err)); err != nil {
		t.Fatal(err)
	}
	return run, a
}

// resume resumes the run r1 in this fixture (another process) from messages, and continues
// it: the continued run's error, the run not finished.
func (f *fixture) resume(t *testing.T, messages []agentgo.Message) (*agentgo.Run, *loop.Agent, error) {
	t.Helper()
	ctx := context.Background()
	resumed, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1", Resume: true, LeaseWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a := f.agent(resumed)
	a.SetMessages(messages)
	return resumed, a, a.Continue(resumed.Context(ctx))
}

func events(t *testing.T, st store.Log, name string) []model.RecordedEvent {
	t.Helper()
	stream, err := model.NewStreamID("s", name)
	if err != nil {
		t.Fatal(err)
	}
	found, err := st.ReadStream(context.Background(), stream, store.ReadStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// requestDigest is the digest of what a model was asked, in its step, left out of a summary.
var requestDigest = regexp.MustCompile(`~[0-9a-f]{12}`)

// summary is each event as type (kind or tool) and step, for comparing a record at a glance.
func summary(found []model.RecordedEvent) []string {
	out := make([]string, 0, len(found))
	for _, e := range found {
		what := e.Type()
		switch {
		case e.Type() == model.TypeMutation:
			what += " " + fmt.Sprint(e.Fields["kind"])
		case e.Type() == model.TypeMessage:
			what += " " + fmt.Sprint(e.Fields["agent"])
		default:
			what += fmt.Sprintf(" %v %v %v", e.Fields["tool"], requestDigest.ReplaceAllString(fmt.Sprint(e.Fields["step_id"]), ""), e.Fields["status"])
		}
		out = append(out, what)
	}
	return out
}

// parents is an event's parents.
func parents(e model.RecordedEvent) []string {
	var out []string
	list, _ := e.Fields["parents"].([]any)
	for _, p := range list {
		out = append(out, fmt.Sprint(p))
	}
	return out
}

func asJSON(t *testing.T, v any) string {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestARunWithTwoToolsIsRecordedCallByCall(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, memory.New(memory.Options{}), agentgo.Options{})
	run, a := f.runToEnd(t)

	recorded := events(t, f.st, "run-r1")
	want := []string{
		"mutation run.started",
		"message user",
		"mutation tool.declared",
		"tool_call model r1/model/turn-0.1 <nil>",
		"tool_result model r1/model/turn-0.1 ok",
		"tool_call lookup r1/tool/t0/call-1 <nil>",
		"tool_result lookup r1/tool/t0/call-1 ok",
		"tool_call deploy r1/tool/t0/call-2 <nil>",
		"tool_result deploy r1/tool/t0/call-2 ok",
		"tool_call model r1/model/turn-1.1 <nil>",
		"tool_result model r1/model/turn-1.1 ok",
		"message agentgo",
		"mutation run.finished",
	}
	if got := summary(recorded); !slices.Equal(got, want) {
		t.Fatalf("the run's record:\n got %q\nwant %q", got, want)
	}
	started := recorded[0].Fields["capabilities"].(map[string]any)
	if started["profile"] != agentgo.Profile || started["recovery"] != "strict" || started["request_before_call"] != "strict" {
		t.Fatalf("run.started publishes %v", started)
	}
	model0 := recorded[4].Fields["result"].(map[string]any)
	usage := model0["usage"].(map[string]any)
	if model0["model"] != "scripted-1" || usage["input_tokens"] != int64(120) || usage["output_tokens"] != int64(30) ||
		usage["input_token_details"].(map[string]any)["cache_read"] != int64(100) || model0["finish_reason"] != "toolUse" {
		t.Fatalf("the model call's result: %v", model0)
	}
	args := recorded[7].Fields["args"].(map[string]any)
	if args["env"] != "prod" || args["replicas"] != int64(3) || recorded[8].Fields["result"] != "deployed" {
		t.Fatalf("deploy's call and result: %v, %v", args, recorded[8].Fields["result"])
	}
	if parents := parents(recorded[8]); !slices.Equal(parents, []string{recorded[7].EventID()}) {
		t.Fatalf("the tool_result follows from its tool_call: %v", parents)
	}
	if recorded[11].Fields["body"] != "deployed api to prod" || !slices.Equal(parents(recorded[11]), []string{recorded[9].EventID()}) {
		t.Fatalf("the answer: %v", recorded[11].Fields)
	}

	// The framework stream holds AgentGo's messages, whole, and gives them back as they were.
	native := events(t, f.st, "agentgo.r1")
	if len(native) != 5 || native[0].Fields["kind"] != agentgo.NativeKind {
		t.Fatalf("the framework stream: %q", summary(native))
	}
	back, err := run.Messages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if asJSON(t, back) != asJSON(t, a.Messages()) {
		t.Fatalf("the messages read back:\n got %s\nwant %s", asJSON(t, back), asJSON(t, a.Messages()))
	}
}

func TestAResumedRunReturnsWhatWasRecordedInsteadOfCallingAgain(t *testing.T) {
	// A process killed after a call's outcome was recorded and before AgentGo committed the
	// message that carries it: deploy's result (message 3), or the model's answer (message 4).
	for _, killedAt := range []int{3, 4} {
		t.Run(fmt.Sprintf("killed before message %d", killedAt), func(t *testing.T) {
			ctx := context.Background()
			st := memory.New(memory.Options{})
			f := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
			run, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1"})
			if err != nil {
				t.Fatal(err)
			}
			first := f.agent(run)
			commits := 0
			first.Committer = func(m agentgo.AgentMessage) error {
				if commits == killedAt {
					run.Drop()
					return errors.New("killed")
				}
				commits++
				return run.CommitMessage(m)
			}
			if err := first.Run(run.Context(ctx), "deploy the api"); err == nil {
				t.Fatal("the first process was not killed")
			}
			before := len(events(t, st, "run-r1"))

			g := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
			resumed, err := g.lg.Start(ctx, agentgo.RunOptions{RunID: "r1", Resume: true, LeaseWait: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			committed, err := resumed.Messages(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(committed) != killedAt {
				t.Fatalf("%d messages committed before the kill, want %d", len(committed), killedAt)
			}
			again := g.agent(resumed)
			again.SetMessages(committed)
			err = again.Continue(resumed.Context(ctx))
			if err := errors.Join(err, resumed.Finish(ctx, err)); err != nil {
				t.Fatal(err)
			}
			// The model's second turn ran before a kill at message 4, not before one at 3.
			asked := map[int]int{3: 1, 4: 0}[killedAt]
			if g.model.Calls != asked || g.lookups.Load() != 0 || g.deploys.Load() != 0 {
				t.Fatalf("called on resume: model %d (want %d), lookup %d, deploy %d", g.model.Calls, asked, g.lookups.Load(), g.deploys.Load())
			}
			if last := again.Messages()[len(again.Messages())-1]; last.TextContent() != "deployed api to prod" || len(again.Messages()) != 5 {
				t.Fatalf("the resumed conversation: %s", asJSON(t, again.Messages()))
			}
			after := summary(events(t, st, "run-r1")[before:])
			// Nothing recorded is called again: what is new is the run's resumption, the model
			// call not made before (declared safe to replay again, as each process does), the answer's message and the run's end.
			want := []string{"mutation run.resumed", "message agentgo", "mutation run.finished"}
			if killedAt == 3 {
				want = slices.Insert(want, 1, "mutation tool.declared", "tool_call model r1/model/turn-1.1 <nil>", "tool_result model r1/model/turn-1.1 ok")
			}
			if !slices.Equal(after, want) {
				t.Fatalf("written on resume: %q", after)
			}
			native := events(t, st, "agentgo.r1")
			if len(native) != 5 {
				t.Fatalf("the framework stream holds %d messages", len(native))
			}
		})
	}
}

// killInsideDeploy runs the fixture's agent until deploy is running, then leaves the run as a
// SIGKILL would (its lease left to expire, deploy's attempt open) and returns the messages
// committed by then.
func killInsideDeploy(t *testing.T, f *fixture) []agentgo.Message {
	t.Helper()
	ctx := context.Background()
	run, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	inside, stuck := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	f.deploy = func(context.Context) (json.RawMessage, error) {
		close(inside)
		<-stuck
		return nil, errors.New("never answered")
	}
	a := f.agent(run)
	ended := make(chan error, 1)
	go func() { ended <- a.Run(run.Context(ctx), "deploy the api") }()
	select {
	case <-inside:
	case err := <-ended:
		t.Fatalf("the run ended before deploy ran: %v", err)
	}
	run.Drop()
	messages, err := run.Messages(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return messages
}

func TestACallLeftUnresolvedByAKillHaltsTheResumedRun(t *testing.T) {
	ctx := context.Background()
	st := memory.New(memory.Options{})
	f := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	committed := killInsideDeploy(t, f)
	open, err := st.OpenAttempts(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].AttemptID != "r1/tool/t0/call-2#1" {
		t.Fatalf("open attempts: %+v", open)
	}

	g := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	resumed, a, err := g.resume(t, committed)
	if !errors.Is(err, agent.ErrUnresolvedAttempt) || !errors.Is(resumed.Halted(), agent.ErrUnresolvedAttempt) {
		t.Fatalf("the resumed run went on: %v", err)
	}
	if err := resumed.Finish(ctx, err); err != nil {
		t.Fatal(err)
	}
	if g.deploys.Load() != 0 || g.lookups.Load() != 0 || g.model.Calls != 0 {
		t.Fatalf("called on resume: deploy %d, lookup %d, model %d", g.deploys.Load(), g.lookups.Load(), g.model.Calls)
	}
	// The model was not told the call failed: the conversation stops at the open call.
	if n := len(a.Messages()); n != len(committed) {
		t.Fatalf("messages after the halt: %d, before %d", n, len(committed))
	}
}

func TestAToolSafeToReplayRunsAgainAfterAKill(t *testing.T) {
	ctx := context.Background()
	st := memory.New(memory.Options{})
	opts := agentgo.Options{LeaseTTL: 300 * time.Millisecond, SafeToReplay: []string{"deploy"}}
	f := newFixture(t, st, opts)
	committed := killInsideDeploy(t, f)

	g := newFixture(t, st, opts)
	resumed, _, err := g.resume(t, committed)
	if err := errors.Join(err, resumed.Finish(ctx, err)); err != nil {
		t.Fatal(err)
	}
	if g.deploys.Load() != 1 || g.lookups.Load() != 0 {
		t.Fatalf("on resume: deploy ran %d times, lookup %d", g.deploys.Load(), g.lookups.Load())
	}
	var deploys []string
	for _, e := range events(t, st, "run-r1") {
		if e.Type() == model.TypeToolResult && e.Fields["tool"] == "deploy" {
			deploys = append(deploys, fmt.Sprintf("%v %v", e.Fields["attempt_id"], e.Fields["status"]))
		}
	}
	// The abandoned attempt closed as such, then the second one's outcome.
	if want := []string{"r1/tool/t0/call-2#1 error", "r1/tool/t0/call-2#2 ok"}; !slices.Equal(deploys, want) {
		t.Fatalf("deploy's results: %q", deploys)
	}
}

func TestAFailedModelAttemptIsRecordedAndTheRetryIsANewAttempt(t *testing.T) {
	f := newFixture(t, memory.New(memory.Options{}), agentgo.Options{})
	f.model.Fail = map[int]bool{1: true}
	f.runToEnd(t)
	var turn1 []string
	for _, e := range events(t, f.st, "run-r1") {
		if e.Type() == model.TypeToolResult && e.Fields["tool"] == agent.ModelTool {
			turn1 = append(turn1, fmt.Sprintf("%v %v", requestDigest.ReplaceAllString(fmt.Sprint(e.Fields["step_id"]), ""), e.Fields["status"]))
		}
	}
	want := []string{"r1/model/turn-0.1 ok", "r1/model/turn-1.1 error", "r1/model/turn-1.2 ok"}
	if !slices.Equal(turn1, want) {
		t.Fatalf("the model calls: %q", turn1)
	}
}

func TestAToolThatFailsIsRecordedAsAnError(t *testing.T) {
	f := newFixture(t, memory.New(memory.Options{}), agentgo.Options{})
	f.deploy = func(context.Context) (json.RawMessage, error) { return nil, errors.New("quota exceeded") }
	f.runToEnd(t)
	for _, e := range events(t, f.st, "run-r1") {
		if e.Type() == model.TypeToolResult && e.Fields["tool"] == "deploy" {
			result := e.Fields["result"].(map[string]any)
			if e.Fields["status"] != "error" || result["message"] != "quota exceeded" {
				t.Fatalf("deploy's result: %v", e.Fields)
			}
			return
		}
	}
	t.Fatal("no result of deploy")
}

func TestASubagentsRunIsAChildOfTheCallThatAskedForIt(t *testing.T) {
	ctx := context.Background()
	st := memory.New(memory.Options{})
	lg, err := agentgo.New(st, "s", agentgo.Options{Model: "scripted-1"})
	if err != nil {
		t.Fatal(err)
	}
	// The research tool runs a subagent, as AgentGo's subagent tool does, under the call's
	// context.
	research := loop.Func{ToolName: "research", Fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		child, err := lg.Start(ctx, agentgo.RunOptions{})
		if err != nil {
			return nil, err
		}
		sub := &loop.Agent{
			Model:            &loop.Scripted{Replies: []agentgo.Message{loop.Reply("the api runs 1.4.2", agentgo.Usage{Input: 9, Output: 5}, "")}},
			ModelMiddlewares: []agentgo.ModelMiddleware{lg.ModelMiddleware()},
			ToolMiddlewares:  []agentgo.ToolMiddleware{lg.ToolMiddleware()},
			Committer:        child.CommitMessage,
		}
		err = sub.Run(child.Context(ctx), "which version does the api run?")
		if err := errors.Join(err, child.Finish(ctx, err)); err != nil {
			return nil, err
		}
		msgs := sub.Messages()
		return json.Marshal(msgs[len(msgs)-1].TextContent())
	}}
	run, err := lg.Start(ctx, agentgo.RunOptions{RunID: "lead"})
	if err != nil {
		t.Fatal(err)
	}
	a := &loop.Agent{
		Model: &loop.Scripted{Replies: []agentgo.Message{
			loop.Reply("", agentgo.Usage{Input: 10, Output: 3}, "", [2]string{"research", `{"q": "api version"}`}),
			loop.Reply("it runs 1.4.2", agentgo.Usage{Input: 20, Output: 4}, ""),
		}},
		Tools:            []loop.Tool{research},
		ModelMiddlewares: []agentgo.ModelMiddleware{lg.ModelMiddleware()},
		ToolMiddlewares:  []agentgo.ToolMiddleware{lg.ToolMiddleware()},
		Committer:        run.CommitMessage,
	}
	err = a.Run(run.Context(ctx), "which version?")
	if err := errors.Join(err, run.Finish(ctx, err)); err != nil {
		t.Fatal(err)
	}

	var call model.RecordedEvent
	for _, e := range events(t, st, "run-lead") {
		if e.Type() == model.TypeToolCall && e.Fields["tool"] == "research" {
			call = e
		}
	}
	child := events(t, st, "run-lead.call-1")
	if len(child) == 0 {
		t.Fatal("the subagent's run is not run-lead.call-1")
	}
	started := child[0]
	if started.Fields["kind"] != "run.started" || started.Fields["parent_run"] != "lead" ||
		!slices.Equal(parents(started), []string{call.EventID()}) {
		t.Fatalf("the subagent's run.started: %v (the call: %s)", started.Fields, call.EventID())
	}
	if got := summary(child); !slices.Contains(got, "message agentgo") || !slices.Contains(got, "tool_result model lead.call-1/model/turn-0.1 ok") {
		t.Fatalf("the subagent's record: %q", got)
	}
}

func TestAMiddlewareWithoutARunInItsContextRefuses(t *testing.T) {
	lg, err := agentgo.New(memory.New(memory.Options{}), "s", agentgo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lg.ToolMiddleware()(context.Background(), agentgo.ToolExecution{}, nil)
	if !errors.Is(err, model.ErrInvalidInput) {
		t.Fatalf("a tool call outside a run: %v", err)
	}
	_, err = lg.ModelMiddleware()(context.Background(), agentgo.ModelExecution{}, nil)
	if !errors.Is(err, model.ErrInvalidInput) {
		t.Fatalf("a model call outside a run: %v", err)
	}
}

func TestACallIDUsedAgainInALaterTurnIsAnotherCall(t *testing.T) {
	// Providers number calls within a reply: lookup and deploy are both call-1, in turns 0
	// and 1. A kill inside deploy must not be answered with lookup's result on resume.
	ctx := context.Background()
	st := memory.New(memory.Options{})
	f := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	usage := agentgo.Usage{Input: 1, Output: 1}
	f.model.Replies = []agentgo.Message{
		loop.Reply("", usage, "", [2]string{"lookup", `{}`}),
		loop.Reply("", usage, "", [2]string{"deploy", `{}`}),
		loop.Reply("done", usage, ""),
	}
	committed := killInsideDeploy(t, f)
	g := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	g.model.Replies = f.model.Replies
	resumed, _, err := g.resume(t, committed)
	if !errors.Is(err, agent.ErrUnresolvedAttempt) {
		t.Fatalf("the resumed run went on past deploy's open call: %v", err)
	}
	if err := resumed.Finish(ctx, err); err != nil {
		t.Fatal(err)
	}
}

func TestARunThatLostItsLeaseCommitsNothingMore(t *testing.T) {
	ctx := context.Background()
	st := memory.New(memory.Options{})
	f := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	stale, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	user := agentgo.Message{Role: agentgo.RoleUser, Content: []agentgo.ContentBlock{{Type: agentgo.ContentText, Text: "hi"}}}
	if err := stale.CommitMessage(user); err != nil {
		t.Fatal(err)
	}
	stale.Drop() // a process paused past its lease
	g := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	resumed, err := g.lg.Start(ctx, agentgo.RunOptions{RunID: "r1", Resume: true, LeaseWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := stale.CommitMessage(user); !errors.Is(err, agent.ErrLeaseLost) {
		t.Fatalf("a run without its lease committed: %v", err)
	}
	if err := resumed.CommitMessage(user); err != nil {
		t.Fatal(err)
	}
	if n := len(events(t, st, "agentgo.r1")); n != 2 {
		t.Fatalf("the framework stream holds %d messages, want 2", n)
	}
	if err := resumed.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func TestARunThatFailedInAnOutageAsksTheModelAgainOnResume(t *testing.T) {
	ctx := context.Background()
	st := memory.New(memory.Options{})
	f := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	f.model.Down = true
	run, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	first := f.agent(run)
	err = first.Run(run.Context(ctx), "deploy the api")
	if err == nil {
		t.Fatal("the run went on with its provider down")
	}
	if err := run.Finish(ctx, err); err != nil {
		t.Fatal(err)
	}

	g := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	resumed, a, err := g.resume(t, first.Messages())
	if err := errors.Join(err, resumed.Finish(ctx, err)); err != nil {
		t.Fatalf("the provider back, the resumed run failed: %v", err)
	}
	if g.model.Calls != 2 || a.Messages()[len(a.Messages())-1].TextContent() != "deployed api to prod" {
		t.Fatalf("model asked %d times; conversation %s", g.model.Calls, asJSON(t, a.Messages()))
	}
}

func TestARunIDUsedAgainStartsAConversationOfItsOwn(t *testing.T) {
	st := memory.New(memory.Options{})
	f := newFixture(t, st, agentgo.Options{})
	f.runToEnd(t)
	again, a := f.runToEnd(t)
	back, err := again.Messages(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 5 || asJSON(t, back) != asJSON(t, a.Messages()) {
		t.Fatalf("the second execution's conversation: %s", asJSON(t, back))
	}
	if n := len(events(t, st, "agentgo.r1")); n != 10 {
		t.Fatalf("the framework stream holds %d messages, want both executions' 10", n)
	}
}

func TestASubagentWithoutARunOfItsOwnIsRefused(t *testing.T) {
	ctx := context.Background()
	lg, err := agentgo.New(memory.New(memory.Options{}), "s", agentgo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var inside error
	research := loop.Func{ToolName: "research", Fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		sub := &loop.Agent{Model: &loop.Scripted{Replies: []agentgo.Message{loop.Reply("x", agentgo.Usage{}, "")}},
			ModelMiddlewares: []agentgo.ModelMiddleware{lg.ModelMiddleware()}}
		inside = sub.Run(ctx, "go") // the parent's context, not a child run's
		return json.RawMessage(`"x"`), nil
	}}
	run, err := lg.Start(ctx, agentgo.RunOptions{RunID: "lead"})
	if err != nil {
		t.Fatal(err)
	}
	a := &loop.Agent{
		Model: &loop.Scripted{Replies: []agentgo.Message{
			loop.Reply("", agentgo.Usage{}, "", [2]string{"research", `{}`}), loop.Reply("ok", agentgo.Usage{}, ""),
		}},
		Tools:            []loop.Tool{research},
		ModelMiddlewares: []agentgo.ModelMiddleware{lg.ModelMiddleware()},
		ToolMiddlewares:  []agentgo.ToolMiddleware{lg.ToolMiddleware()},
		Committer:        run.CommitMessage,
	}
	err = a.Run(run.Context(ctx), "go")
	if err := errors.Join(err, run.Finish(ctx, err)); err != nil {
		t.Fatal(err)
	}
	if !errors.Is(inside, model.ErrInvalidInput) {
		t.Fatalf("a subagent recorded into its parent's run: %v", inside)
	}
}

func TestAProcessWhoseLeaseWasTakenOverWritesNothingMore(t *testing.T) {
	user := func(text string) agentgo.Message {
		return agentgo.Message{Role: agentgo.RoleUser, Content: []agentgo.ContentBlock{{Type: agentgo.ContentText, Text: text}}}
	}
	deploy := agentgo.ToolExecution{Execution: agentgo.Execution{ID: "call-1", Kind: agentgo.ExecutionKindTool},
		Call: agentgo.ToolCall{ID: "call-1", Name: "deploy", Args: json.RawMessage(`{}`)}}
	for _, next := range []string{"message", "tool call"} {
		t.Run(next, func(t *testing.T) {
			// Given a run whose renewals cannot save it (a minute apart), one message committed
			ctx := context.Background()
			st := memory.New(memory.Options{})
			f := newFixture(t, st, agentgo.Options{LeaseTTL: time.Minute})
			stale, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1"})
			if err != nil {
				t.Fatal(err)
			}
			if err := stale.CommitMessage(user("before")); err != nil {
				t.Fatal(err)
			}
			// When its process stops past its lease and another resumes the run
			released, err := st.Lease(ctx, store.Release, "s", "run-r1", stale.Fence().Owner, 0)
			if err != nil || released != 1 {
				t.Fatalf("release: %d, %v", released, err)
			}
			g := newFixture(t, st, agentgo.Options{LeaseTTL: time.Minute})
			resumed, err := g.lg.Start(ctx, agentgo.RunOptions{RunID: "r1", Resume: true})
			if err != nil {
				t.Fatal(err)
			}
			// Then the stopped process's next write is refused, and its run halts
			ran := false
			if next == "message" {
				err = stale.CommitMessage(user("zombie"))
				var lost *model.LeaseLostError
				if !errors.As(err, &lost) || lost.Token != resumed.Fence().Token {
					t.Fatalf("the stale commit returned %v, want the store's LeaseLost naming token %d", err, resumed.Fence().Token)
				}
			} else {
				_, err = f.lg.ToolMiddleware()(stale.Context(ctx), deploy, func(context.Context, agentgo.ToolExecution) (agentgo.ToolResult, error) {
					ran = true
					return agentgo.ToolResult{}, nil
				})
			}
			if !errors.Is(err, agent.ErrLeaseLost) || !errors.Is(stale.Halted(), agent.ErrLeaseLost) || ran {
				t.Fatalf("the stale %s: %v (halted: %v, the tool ran: %v)", next, err, stale.Halted(), ran)
			}
			if err := stale.Finish(ctx, err); err != nil {
				t.Fatalf("the stale run's Finish: %v", err)
			}
			// And nothing of it is stored, while the new holder commits on
			if err := resumed.CommitMessage(user("heir")); err != nil {
				t.Fatal(err)
			}
			if err := resumed.Finish(ctx, nil); err != nil {
				t.Fatal(err)
			}
			if got, want := summary(events(t, st, "run-r1")), []string{"mutation run.started", "message user",
				"mutation run.resumed", "message user", "mutation run.finished"}; !slices.Equal(got, want) {
				t.Fatalf("the run's record:\n got %q\nwant %q", got, want)
			}
			var said []string
			for _, e := range events(t, st, "agentgo.r1") {
				said = append(said, asJSON(t, e.Fields["message"].(map[string]any)["content"]))
			}
			if want := []string{`[{"text":"before","type":"text"}]`, `[{"text":"heir","type":"text"}]`}; !slices.Equal(said, want) {
				t.Fatalf("the framework stream: %q", said)
			}
		})
	}
}
