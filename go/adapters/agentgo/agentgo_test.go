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

	ag "github.com/compforge/agentgo"

	"github.com/ledger-bus/ledger-bus/go/adapters/agentgo"
	"github.com/ledger-bus/ledger-bus/go/adapters/agentgo/internal/script"
	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
	"github.com/ledger-bus/ledger-bus/go/store/memory"
)

// fixture is an AgentGo agent of two tools on a ledger, as one process has it: the scripted
// model asks for lookup and deploy, then answers.
type fixture struct {
	st      *memory.Store
	lg      *agentgo.Ledger
	model   *script.Model
	lookups atomic.Int32
	deploys atomic.Int32
	// deploy, when set, is what the deploy tool does (else it answers at once).
	deploy func(ctx context.Context) (json.RawMessage, error)
}

var (
	usage1 = ag.Usage{Model: "scripted-1", Input: 120, Output: 30, CacheRead: 100}
	usage2 = ag.Usage{Model: "scripted-1", Input: 200, Output: 12}
)

func newFixture(t *testing.T, st *memory.Store, opts agentgo.Options) *fixture {
	t.Helper()
	if opts.Model == "" {
		opts.Model = "scripted-1"
	}
	lg, err := agentgo.New(st, "s", opts)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{st: st, lg: lg, model: &script.Model{Replies: []ag.Message{
		script.Reply("", usage1, [2]string{"lookup", `{"service": "api"}`}, [2]string{"deploy", `{"env": "prod", "replicas": 3}`}),
		script.Reply("deployed api to prod", usage2),
	}}}
}

// agent is the fixture's agent for run, wired as the documentation shows; opts come after.
func (f *fixture) agent(run *agentgo.Run, opts ...ag.AgentOption) *ag.Agent {
	lookup := ag.NewFuncTool("lookup", "the service's version", nil, func(context.Context, json.RawMessage) (json.RawMessage, error) {
		f.lookups.Add(1)
		return json.RawMessage(`{"version":"1.4.2"}`), nil
	})
	deploy := ag.NewFuncTool("deploy", "deploys the service", nil, func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		f.deploys.Add(1)
		if f.deploy != nil {
			return f.deploy(ctx)
		}
		return json.RawMessage(`"deployed"`), nil
	})
	wiring := []ag.AgentOption{
		ag.WithModel(f.model), ag.WithTools(lookup, deploy), ag.WithMaxRetries(2),
		ag.WithModelMiddlewares(f.lg.ModelMiddleware()),
		ag.WithToolMiddlewares(f.lg.ToolMiddleware()),
		ag.WithMessageCommitter(run.CommitMessage),
		ag.WithBeforeRun(run.Restore),
		ag.WithAfterRun(run.Ended),
	}
	return ag.NewAgent(append(wiring, opts...)...)
}

// prompt runs a as AgentGo runs it, to its end: the error Finish records.
func prompt(ctx context.Context, run *agentgo.Run, a *ag.Agent, text string) error {
	err := a.Prompt(run.Context(ctx), text)
	a.WaitForIdle()
	return run.Finish(ctx, err)
}

// runToEnd runs the fixture's agent as the run r1, from the prompt to its answer.
func (f *fixture) runToEnd(t *testing.T, opts ...ag.AgentOption) (*agentgo.Run, *ag.Agent) {
	t.Helper()
	ctx := context.Background()
	run, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	a := f.agent(run, opts...)
	if err := prompt(ctx, run, a, "deploy the api"); err != nil {
		t.Fatal(err)
	}
	return run, a
}

// resume resumes the run r1 in this fixture (another process) and continues it to its end:
// the run, the agent, and the run's outcome as Finish recorded it.
func (f *fixture) resume(t *testing.T, opts ...ag.AgentOption) (*agentgo.Run, *ag.Agent, error) {
	t.Helper()
	ctx := context.Background()
	resumed, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1", Resume: true, LeaseWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	a := f.agent(resumed, opts...)
	err = a.Continue(resumed.Context(ctx))
	a.WaitForIdle()
	return resumed, a, resumed.Finish(ctx, err)
}

// killedAt runs the fixture's agent as r1 until it reaches a point where the test's hook waits
// (inside is closed there), then leaves the run as a SIGKILL would: its lease left to expire,
// nothing more written, whatever was open left open.
func killedAt(t *testing.T, f *fixture, inside <-chan struct{}, opts ...ag.AgentOption) {
	t.Helper()
	ctx := context.Background()
	run, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	a := f.agent(run, opts...)
	if err := a.Prompt(run.Context(ctx), "deploy the api"); err != nil {
		t.Fatal(err)
	}
	<-inside
	run.Drop()
}

// stuck is a point the test's hook waits at until the test ends: inside is closed once it
// is reached.
func stuck(t *testing.T) (inside chan struct{}, wait func()) {
	inside, ended := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(ended) })
	var once atomic.Bool
	return inside, func() {
		if once.CompareAndSwap(false, true) {
			close(inside)
		}
		<-ended
	}
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

// results is each tool_result of tool as its attempt and status.
func results(t *testing.T, st store.Log, name, tool string) []string {
	t.Helper()
	var out []string
	for _, e := range events(t, st, name) {
		if e.Type() == model.TypeToolResult && e.Fields["tool"] == tool {
			out = append(out, fmt.Sprintf("%v %v", requestDigest.ReplaceAllString(fmt.Sprint(e.Fields["attempt_id"]), ""), e.Fields["status"]))
		}
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

func last(a *ag.Agent) string {
	msgs := a.Messages()
	return msgs[len(msgs)-1].TextContent()
}

func TestARunWithTwoToolsIsRecordedCallByCall(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, memory.New(), agentgo.Options{})
	run, a := f.runToEnd(t, ag.WithThinkingLevel(ag.ThinkingLow), ag.WithPromptCacheKey("task-42"))

	recorded := events(t, f.st, "run-r1")
	want := []string{
		"mutation run.started",
		"message user",
		"mutation tool.declared",
		"tool_call model r1/model/model-1.1 <nil>",
		"tool_result model r1/model/model-1.1 ok",
		"tool_call lookup r1/tool/t1/call-1 <nil>",
		"tool_result lookup r1/tool/t1/call-1 ok",
		"tool_call deploy r1/tool/t1/call-2 <nil>",
		"tool_result deploy r1/tool/t1/call-2 ok",
		"tool_call model r1/model/model-2.1 <nil>",
		"tool_result model r1/model/model-2.1 ok",
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
	// The request: AgentGo's execution, the tools offered and the call's options.
	asked := recorded[3].Fields["args"].(map[string]any)
	if asJSON(t, asked) != `{"execution":"model-1","messages":1,"model":"scripted-1","options":{"prompt_cache_key":"task-42","thinking_level":"low"},"tools":["lookup","deploy"],"turn":1}` {
		t.Fatalf("the model call's request: %s", asJSON(t, asked))
	}
	model1 := recorded[4].Fields["result"].(map[string]any)
	usage := model1["usage"].(map[string]any)
	if model1["model"] != "scripted-1" || usage["input_tokens"] != int64(120) || usage["output_tokens"] != int64(30) ||
		usage["input_token_details"].(map[string]any)["cache_read"] != int64(100) || model1["finish_reason"] != "toolUse" {
		t.Fatalf("the model call's result: %v", model1)
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
	if f.model.Calls() != 2 || f.lookups.Load() != 1 || f.deploys.Load() != 1 {
		t.Fatalf("model asked %d times, lookup ran %d, deploy %d", f.model.Calls(), f.lookups.Load(), f.deploys.Load())
	}
}

func TestAKilledRunResumesThroughAgentGosRestoreWithoutCallingAgain(t *testing.T) {
	// Each point a kill can meet a run at, and what the resumed run may call again: the model
	// only for a reply the ledger lacks, no tool whose outcome it holds.
	for _, point := range []struct {
		name   string
		inject func(f *fixture, wait func()) []ag.AgentOption
		model  int
	}{
		{"inside the provider, the answer not yet recorded", func(f *fixture, wait func()) []ag.AgentOption {
			f.model.Before = func(_ context.Context, index int) error {
				if index == 1 {
					wait()
				}
				return nil
			}
			return nil
		}, 1},
		{"the answer recorded, not committed", func(f *fixture, wait func()) []ag.AgentOption {
			after := func(ctx context.Context, exec ag.ModelExecution, next ag.ModelExecuteFunc) (ag.ModelResult, error) {
				result, err := next(ctx, exec)
				if exec.TurnIndex == 2 {
					wait()
				}
				return result, err
			}
			return []ag.AgentOption{ag.WithModelMiddlewares(after, f.lg.ModelMiddleware())}
		}, 0},
		{"the batch's outcomes recorded, its results not committed", func(f *fixture, wait func()) []ag.AgentOption {
			after := func(ctx context.Context, exec ag.ToolExecution, next ag.ToolExecuteFunc) (ag.ToolResult, error) {
				result, err := next(ctx, exec)
				if exec.Call.Name == "deploy" {
					wait()
				}
				return result, err
			}
			return []ag.AgentOption{ag.WithToolMiddlewares(after, f.lg.ToolMiddleware())}
		}, 1},
		{"between the batch's tools", func(f *fixture, wait func()) []ag.AgentOption {
			before := func(ctx context.Context, exec ag.ToolExecution, next ag.ToolExecuteFunc) (ag.ToolResult, error) {
				if exec.Call.Name == "deploy" {
					wait()
				}
				return next(ctx, exec)
			}
			return []ag.AgentOption{ag.WithToolMiddlewares(before, f.lg.ToolMiddleware())}
		}, 1},
		{"the answer committed, the run's end not recorded", func(f *fixture, wait func()) []ag.AgentOption {
			// AgentGo's Continue has nothing to do (ErrBadContinuation), and Finish records
			// the run's good end.
			return []ag.AgentOption{ag.WithAfterRun(func(context.Context, ag.AfterRunContext) error {
				wait()
				return nil
			})}
		}, 0},
	} {
		t.Run(point.name, func(t *testing.T) {
			st := memory.New()
			f := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
			inside, wait := stuck(t)
			killedAt(t, f, inside, point.inject(f, wait)...)
			before := f.lookups.Load() + f.deploys.Load()

			g := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
			_, a, err := g.resume(t)
			if err != nil {
				t.Fatal(err)
			}
			// A tool the first process began is deploy, only when the kill came after it.
			deploys := int32(1) - f.deploys.Load()
			if g.model.Calls() != point.model || g.lookups.Load() != 0 || g.deploys.Load() != deploys {
				t.Fatalf("called on resume: model %d (want %d), lookup %d, deploy %d (want %d); before the kill %d tools ran",
					g.model.Calls(), point.model, g.lookups.Load(), g.deploys.Load(), deploys, before)
			}
			if last(a) != "deployed api to prod" || len(a.Messages()) != 5 || a.State().Progress.CompletedTurns != 2 {
				t.Fatalf("the resumed conversation: %s (progress %+v)", asJSON(t, a.Messages()), a.State().Progress)
			}
			if n := len(events(t, st, "agentgo.r1")); n != 5 {
				t.Fatalf("the framework stream holds %d messages, want each of the conversation's once", n)
			}
			open, err := st.OpenAttempts(context.Background(), "s")
			if err != nil || len(open) != 0 {
				t.Fatalf("open attempts after the resumed run: %+v, %v", open, err)
			}
		})
	}
}

func TestACallLeftUnresolvedByAKillHaltsTheResumedRun(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	f := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	inside, wait := stuck(t)
	f.deploy = func(context.Context) (json.RawMessage, error) {
		wait()
		return nil, errors.New("never answered")
	}
	killedAt(t, f, inside)
	open, err := st.OpenAttempts(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if len(open) != 1 || open[0].AttemptID != "r1/tool/t1/call-2#1" {
		t.Fatalf("open attempts: %+v", open)
	}

	g := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	resumed, a, err := g.resume(t)
	if !errors.Is(err, agent.ErrUnresolvedAttempt) || !errors.Is(resumed.Halted(), agent.ErrUnresolvedAttempt) {
		t.Fatalf("the resumed run went on: %v", err)
	}
	if g.deploys.Load() != 0 || g.lookups.Load() != 0 || g.model.Calls() != 0 {
		t.Fatalf("called on resume: deploy %d, lookup %d, model %d", g.deploys.Load(), g.lookups.Load(), g.model.Calls())
	}
	// The model was not told the call failed: the conversation stops at the reply that asked.
	if n := len(a.Messages()); n != 2 || len(events(t, st, "agentgo.r1")) != 2 {
		t.Fatalf("messages after the halt: %s", asJSON(t, a.Messages()))
	}

	// Once an operator records deploy's outcome, the next resume goes on with it.
	resolve(t, st, "r1", "deploy", "r1/tool/t1/call-2#1", "deployed by hand")
	h := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	_, a, err = h.resume(t)
	if err != nil || h.deploys.Load() != 0 || h.model.Calls() != 1 || last(a) != "deployed api to prod" {
		t.Fatalf("after the resolve: %v; deploy ran %d, model %d; %s", err, h.deploys.Load(), h.model.Calls(), asJSON(t, a.Messages()))
	}
	if got := a.Messages()[3].TextContent(); got != `"deployed by hand"` {
		t.Fatalf("deploy's result in the conversation: %s", got)
	}
}

func TestAToolSafeToReplayRunsAgainAfterAKill(t *testing.T) {
	st := memory.New()
	opts := agentgo.Options{LeaseTTL: 300 * time.Millisecond, SafeToReplay: []string{"deploy"}}
	f := newFixture(t, st, opts)
	inside, wait := stuck(t)
	f.deploy = func(context.Context) (json.RawMessage, error) {
		wait()
		return nil, errors.New("never answered")
	}
	killedAt(t, f, inside)

	g := newFixture(t, st, opts)
	if _, _, err := g.resume(t); err != nil {
		t.Fatal(err)
	}
	if g.deploys.Load() != 1 || g.lookups.Load() != 0 {
		t.Fatalf("on resume: deploy ran %d times, lookup %d", g.deploys.Load(), g.lookups.Load())
	}
	// The abandoned attempt closed as such, then the second one's outcome.
	if got, want := results(t, st, "run-r1", "deploy"), []string{"r1/tool/t1/call-2#1 error", "r1/tool/t1/call-2#2 ok"}; !slices.Equal(got, want) {
		t.Fatalf("deploy's results: %q", got)
	}
}

func TestAFailedModelAttemptIsRecordedAndTheRetryIsANewAttempt(t *testing.T) {
	f := newFixture(t, memory.New(), agentgo.Options{})
	var failed atomic.Bool
	f.model.Before = func(_ context.Context, index int) error {
		if index == 1 && failed.CompareAndSwap(false, true) {
			return script.Retryable{Err: errors.New("503 overloaded")}
		}
		return nil
	}
	f.runToEnd(t)
	got := results(t, f.st, "run-r1", agent.ModelTool)
	if want := []string{"r1/model/model-1.1#1 ok", "r1/model/model-2.1#1 error", "r1/model/model-2.2#1 ok"}; !slices.Equal(got, want) {
		t.Fatalf("the model calls: %q", got)
	}
}

func TestARunThatFailedInAnOutageAsksTheModelAgainOnResume(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	f := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	f.model.Before = func(context.Context, int) error { return script.Retryable{Err: errors.New("503 overloaded")} }
	run, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := prompt(ctx, run, f.agent(run), "deploy the api"); err == nil {
		t.Fatal("the run went on with its provider down")
	}
	if f.model.Calls() != 3 {
		t.Fatalf("the model was asked %d times, want the first attempt and two retries", f.model.Calls())
	}

	// The provider back, the resumed run asks the first turn again (its attempts all recorded
	// as failed) and goes on.
	g := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	_, a, err := g.resume(t)
	if err != nil || g.model.Calls() != 2 || last(a) != "deployed api to prod" {
		t.Fatalf("resumed: %v; model asked %d times; conversation %s", err, g.model.Calls(), asJSON(t, a.Messages()))
	}
}

func TestAToolThatFailsIsRecordedAsAnError(t *testing.T) {
	f := newFixture(t, memory.New(), agentgo.Options{})
	f.deploy = func(context.Context) (json.RawMessage, error) { return nil, errors.New("quota exceeded") }
	f.runToEnd(t)
	for _, e := range events(t, f.st, "run-r1") {
		if e.Type() == model.TypeToolResult && e.Fields["tool"] == "deploy" {
			// AgentGo makes a tool's error its result's content, a JSON string.
			if e.Fields["status"] != "error" || e.Fields["result"] != "quota exceeded" {
				t.Fatalf("deploy's result: %v", e.Fields)
			}
			return
		}
	}
	t.Fatal("no result of deploy")
}

// shot is a tool whose result is content blocks (an image and its caption).
type shot struct{ runs *atomic.Int32 }

func (shot) Name() string                                                      { return "screenshot" }
func (shot) Description() string                                               { return "a screenshot of the page" }
func (shot) Schema() map[string]any                                            { return nil }
func (shot) Execute(context.Context, json.RawMessage) (json.RawMessage, error) { return nil, nil }
func (s shot) ExecuteContent(context.Context, json.RawMessage) ([]ag.ContentBlock, error) {
	s.runs.Add(1)
	return []ag.ContentBlock{ag.ImageBlock("aGVsbG8=", "image/png"), ag.TextBlock("the login page")}, nil
}

func TestAResultsContentBlocksAndDetailsAreRecordedAndReturnedOnResume(t *testing.T) {
	st := memory.New()
	f := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	f.model.Replies = []ag.Message{
		script.Reply("", usage1, [2]string{"screenshot", `{}`}, [2]string{"deploy", `{}`}),
		script.Reply("done", usage2),
	}
	var runs atomic.Int32
	// An application's middleware inside the adapter's adds details for its UI.
	details := func(ctx context.Context, exec ag.ToolExecution, next ag.ToolExecuteFunc) (ag.ToolResult, error) {
		result, err := next(ctx, exec)
		if exec.Call.Name == "screenshot" {
			result.Details = map[string]any{"width": 800}
		}
		return result, err
	}
	inside, wait := stuck(t)
	f.deploy = func(context.Context) (json.RawMessage, error) {
		wait()
		return nil, errors.New("never answered")
	}
	killedAt(t, f, inside, ag.WithTools(shot{&runs}, ag.NewFuncTool("deploy", "", nil, func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		return f.deploy(ctx)
	})), ag.WithToolMiddlewares(f.lg.ToolMiddleware(), details))
	recorded := results(t, st, "run-r1", "screenshot")
	var value any
	for _, e := range events(t, st, "run-r1") {
		if e.Type() == model.TypeToolResult && e.Fields["tool"] == "screenshot" {
			value = e.Fields["result"]
		}
	}
	if len(recorded) != 1 || asJSON(t, value) != `{"agentgo.tool_result":{"content":"the login page","content_blocks":[{"image":{"data":"aGVsbG8=","mime_type":"image/png"},"type":"image"},{"text":"the login page","type":"text"}],"details":{"width":800}}}` {
		t.Fatalf("the screenshot's result: %s", asJSON(t, value))
	}

	g := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond, SafeToReplay: []string{"deploy"}})
	g.model.Replies = f.model.Replies
	var seen ag.ToolResult
	observe := func(ctx context.Context, exec ag.ToolExecution, next ag.ToolExecuteFunc) (ag.ToolResult, error) {
		result, err := next(ctx, exec)
		if exec.Call.Name == "screenshot" {
			seen = result
		}
		return result, err
	}
	_, a, err := g.resume(t, ag.WithTools(shot{&runs}, ag.NewFuncTool("deploy", "", nil, func(context.Context, json.RawMessage) (json.RawMessage, error) {
		return json.RawMessage(`"deployed"`), nil
	})), ag.WithToolMiddlewares(observe, g.lg.ToolMiddleware()))
	if err != nil {
		t.Fatal(err)
	}
	if runs.Load() != 1 || len(seen.ContentBlocks) != 2 || seen.ContentBlocks[0].Image == nil || asJSON(t, seen.Details) != `{"width":800}` {
		t.Fatalf("the screenshot ran %d times; replayed as %+v", runs.Load(), seen)
	}
	// AgentGo puts a result of content blocks in the conversation as those blocks.
	if blocks := a.Messages()[2].(ag.Message).Content; len(blocks) != 2 || blocks[0].Type != ag.ContentImage {
		t.Fatalf("the screenshot's message: %s", asJSON(t, a.Messages()[2]))
	}
}

func TestAConversationOfEarlierRunsIsResumedWhole(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	f := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	f.model.Replies = append(f.model.Replies, script.Reply("", usage1, [2]string{"deploy", `{"env": "staging"}`}), script.Reply("and to staging", usage2))
	// The agent's first run, r1, to its end; its second, r2, on the same agent, killed once
	// its deploy's outcome is recorded.
	first, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	inside, wait := stuck(t)
	second := new(agentgo.Run)
	hang := func(ctx context.Context, exec ag.ToolExecution, next ag.ToolExecuteFunc) (ag.ToolResult, error) {
		result, err := next(ctx, exec)
		if exec.TurnIndex == 1 && f.deploys.Load() == 2 {
			wait()
		}
		return result, err
	}
	a := f.agent(first, ag.WithToolMiddlewares(hang, f.lg.ToolMiddleware()))
	if err := prompt(ctx, first, a, "deploy the api"); err != nil {
		t.Fatal(err)
	}
	if second, err = f.lg.Start(ctx, agentgo.RunOptions{RunID: "r2"}); err != nil {
		t.Fatal(err)
	}
	a.SetMessageCommitter(second.CommitMessage)
	// The hooks are the agent's; a new run's come with a new agent, or as here with the options
	// set again on one built for it.
	b := f.agent(second, ag.WithToolMiddlewares(hang, f.lg.ToolMiddleware()))
	if err := b.SetMessages(a.Messages()); err != nil {
		t.Fatal(err)
	}
	if err := b.Prompt(second.Context(ctx), "now staging"); err != nil {
		t.Fatal(err)
	}
	<-inside
	second.Drop()
	if kinds := summary(events(t, st, "agentgo.r2")); kinds[0] != "mutation "+agentgo.BaselineKind {
		t.Fatalf("r2's framework stream: %q", kinds)
	}

	g := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	g.model.Replies = f.model.Replies
	resumed, err := g.lg.Start(ctx, agentgo.RunOptions{RunID: "r2", Resume: true, LeaseWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := g.agent(resumed)
	err = c.Continue(resumed.Context(ctx))
	c.WaitForIdle()
	if err := resumed.Finish(ctx, err); err != nil {
		t.Fatal(err)
	}
	// r1's five messages, r2's prompt, reply, deploy's result and answer: the model asked only
	// for the answer, the first run's messages and the second's reply given back from the ledger.
	if len(c.Messages()) != 9 || last(c) != "and to staging" || g.model.Calls() != 1 || g.deploys.Load() != 0 {
		t.Fatalf("resumed r2: model %d, deploy %d; %s", g.model.Calls(), g.deploys.Load(), asJSON(t, c.Messages()))
	}
}

func TestTheHooksRefuseWhatWouldLoseTrackOfTheRun(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	f := newFixture(t, st, agentgo.Options{})
	run, a := f.runToEnd(t)
	// A second AgentGo run recorded as the first: its turns would take the first's steps.
	if err := a.Prompt(run.Context(ctx), "again"); !errors.Is(err, model.ErrInvalidInput) {
		t.Fatalf("a second AgentGo run under r1: %v", err)
	}
	// A resumed run given a prompt of its own instead of Continue.
	resumed, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1", Resume: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.agent(resumed).Prompt(resumed.Context(ctx), "deploy the api"); !errors.Is(err, model.ErrInvalidInput) {
		t.Fatalf("a resumed run's prompt: %v", err)
	}
	// A committer without the restore hook before it.
	unhooked, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r2"})
	if err != nil {
		t.Fatal(err)
	}
	if err := unhooked.CommitMessage(ag.UserMsg("hi")); !errors.Is(err, model.ErrInvalidInput) {
		t.Fatalf("a commit before the restore hook: %v", err)
	}
	for _, r := range []*agentgo.Run{resumed, unhooked} {
		_ = r.Finish(ctx, nil)
	}
}

func TestASubagentsRunIsAChildOfTheCallThatAskedForIt(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	lg, err := agentgo.New(st, "s", agentgo.Options{Model: "scripted-1"})
	if err != nil {
		t.Fatal(err)
	}
	// The research tool runs a subagent, as AgentGo's subagent tool does, under the call's
	// context.
	research := ag.NewFuncTool("research", "", nil, func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		child, err := lg.Start(ctx, agentgo.RunOptions{})
		if err != nil {
			return nil, err
		}
		sub := ag.NewAgent(ag.WithModel(&script.Model{Replies: []ag.Message{script.Reply("the api runs 1.4.2", ag.Usage{Input: 9, Output: 5})}}),
			ag.WithModelMiddlewares(lg.ModelMiddleware()), ag.WithToolMiddlewares(lg.ToolMiddleware()),
			ag.WithMessageCommitter(child.CommitMessage), ag.WithBeforeRun(child.Restore), ag.WithAfterRun(child.Ended))
		if err := prompt(ctx, child, sub, "which version does the api run?"); err != nil {
			return nil, err
		}
		return json.Marshal(last(sub))
	})
	run, err := lg.Start(ctx, agentgo.RunOptions{RunID: "lead"})
	if err != nil {
		t.Fatal(err)
	}
	a := ag.NewAgent(ag.WithModel(&script.Model{Replies: []ag.Message{
		script.Reply("", ag.Usage{Input: 10, Output: 3}, [2]string{"research", `{"q": "api version"}`}),
		script.Reply("it runs 1.4.2", ag.Usage{Input: 20, Output: 4}),
	}}), ag.WithTools(research),
		ag.WithModelMiddlewares(lg.ModelMiddleware()), ag.WithToolMiddlewares(lg.ToolMiddleware()),
		ag.WithMessageCommitter(run.CommitMessage), ag.WithBeforeRun(run.Restore), ag.WithAfterRun(run.Ended))
	if err := prompt(ctx, run, a, "which version?"); err != nil {
		t.Fatal(err)
	}

	var call model.RecordedEvent
	for _, e := range events(t, st, "run-lead") {
		if e.Type() == model.TypeToolCall && e.Fields["tool"] == "research" {
			call = e
		}
	}
	child := events(t, st, "run-lead.t1.call-1")
	if len(child) == 0 {
		t.Fatal("the subagent's run is not run-lead.t1.call-1")
	}
	started := child[0]
	if started.Fields["kind"] != "run.started" || started.Fields["parent_run"] != "lead" ||
		!slices.Equal(parents(started), []string{call.EventID()}) {
		t.Fatalf("the subagent's run.started: %v (the call: %s)", started.Fields, call.EventID())
	}
	if got := summary(child); !slices.Contains(got, "message agentgo") || !slices.Contains(got, "tool_result model lead.t1.call-1/model/model-1.1 ok") {
		t.Fatalf("the subagent's record: %q", got)
	}
	if last(a) != "it runs 1.4.2" {
		t.Fatalf("the answer: %s", asJSON(t, a.Messages()))
	}
}

func TestAMiddlewareWithoutARunInItsContextRefuses(t *testing.T) {
	lg, err := agentgo.New(memory.New(), "s", agentgo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = lg.ToolMiddleware()(context.Background(), ag.ToolExecution{}, nil)
	if !errors.Is(err, model.ErrInvalidInput) {
		t.Fatalf("a tool call outside a run: %v", err)
	}
	_, err = lg.ModelMiddleware()(context.Background(), ag.ModelExecution{}, nil)
	if !errors.Is(err, model.ErrInvalidInput) {
		t.Fatalf("a model call outside a run: %v", err)
	}
}

func TestACallIDUsedAgainInALaterTurnIsAnotherCall(t *testing.T) {
	// Providers number calls within a reply: lookup and deploy are both call-1, in turns 1
	// and 2. A kill inside deploy must not be answered with lookup's result on resume.
	st := memory.New()
	f := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	f.model.Replies = []ag.Message{
		script.Reply("", usage1, [2]string{"lookup", `{}`}),
		script.Reply("", usage1, [2]string{"deploy", `{}`}),
		script.Reply("done", usage2),
	}
	inside, wait := stuck(t)
	f.deploy = func(context.Context) (json.RawMessage, error) {
		wait()
		return nil, errors.New("never answered")
	}
	killedAt(t, f, inside)
	g := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	g.model.Replies = f.model.Replies
	if _, _, err := g.resume(t); !errors.Is(err, agent.ErrUnresolvedAttempt) {
		t.Fatalf("the resumed run went on past deploy's open call: %v", err)
	}
}

// resolve closes an open attempt as `ledger-bus resolve --ok` does: a tool_result of the
// operator's in the run's stream.
func resolve(t *testing.T, st store.Log, run, tool, attemptID string, result any) {
	t.Helper()
	stream, err := model.NewStreamID("s", "run-"+run)
	if err != nil {
		t.Fatal(err)
	}
	event := model.Event{"type": model.TypeToolResult, "agent": "operator", "tool": tool, "attempt_id": attemptID,
		"status": "ok", "result": result, "run_id": run}
	if _, err := st.Append(context.Background(), stream, model.AnyVersion, "resolve:"+attemptID, []model.Event{event}); err != nil {
		t.Fatal(err)
	}
}

// restored is run with its restore hook called as AgentGo calls it before a run.
func restored(t *testing.T, run *agentgo.Run, kind ag.RunKind) *agentgo.Run {
	t.Helper()
	if _, err := run.Restore(context.Background(), ag.BeforeRunContext{Kind: kind}); err != nil {
		t.Fatal(err)
	}
	return run
}

func TestARunThatLostItsLeaseCommitsNothingMore(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	f := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	stale, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	restored(t, stale, ag.RunKindPrompt)
	if err := stale.CommitMessage(ag.UserMsg("hi")); err != nil {
		t.Fatal(err)
	}
	stale.Drop() // a process paused past its lease
	g := newFixture(t, st, agentgo.Options{LeaseTTL: 300 * time.Millisecond})
	resumed, err := g.lg.Start(ctx, agentgo.RunOptions{RunID: "r1", Resume: true, LeaseWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	restored(t, resumed, ag.RunKindContinue)
	if err := stale.CommitMessage(ag.UserMsg("more")); !errors.Is(err, agent.ErrLeaseLost) {
		t.Fatalf("a run without its lease committed: %v", err)
	}
	if err := resumed.CommitMessage(ag.UserMsg("more")); err != nil {
		t.Fatal(err)
	}
	if n := len(events(t, st, "agentgo.r1")); n != 2 {
		t.Fatalf("the framework stream holds %d messages, want 2", n)
	}
	if err := resumed.Finish(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func TestARunIDUsedAgainStartsAConversationOfItsOwn(t *testing.T) {
	st := memory.New()
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
	lg, err := agentgo.New(memory.New(), "s", agentgo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var inside error
	research := ag.NewFuncTool("research", "", nil, func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		sub := ag.NewAgent(ag.WithModel(&script.Model{Replies: []ag.Message{script.Reply("x", ag.Usage{})}}),
			ag.WithModelMiddlewares(lg.ModelMiddleware()))
		if err := sub.Prompt(ctx, "go"); err != nil { // the parent's context, not a child run's
			return nil, err
		}
		sub.WaitForIdle()
		inside = errors.New(sub.State().Error)
		return json.RawMessage(`"x"`), nil
	})
	run, err := lg.Start(ctx, agentgo.RunOptions{RunID: "lead"})
	if err != nil {
		t.Fatal(err)
	}
	a := ag.NewAgent(ag.WithModel(&script.Model{Replies: []ag.Message{
		script.Reply("", ag.Usage{}, [2]string{"research", `{}`}), script.Reply("ok", ag.Usage{}),
	}}), ag.WithTools(research),
		ag.WithModelMiddlewares(lg.ModelMiddleware()), ag.WithToolMiddlewares(lg.ToolMiddleware()),
		ag.WithMessageCommitter(run.CommitMessage), ag.WithBeforeRun(run.Restore), ag.WithAfterRun(run.Ended))
	if err := prompt(ctx, run, a, "go"); err != nil {
		t.Fatal(err)
	}
	if inside == nil || !regexp.MustCompile(`needs a run of its own`).MatchString(inside.Error()) {
		t.Fatalf("a subagent recorded into its parent's run: %v", inside)
	}
}

func TestAProcessWhoseLeaseWasTakenOverWritesNothingMore(t *testing.T) {
	deploy := ag.ToolExecution{Execution: ag.Execution{ID: "call-1", Kind: ag.ExecutionKindTool, TurnIndex: 1},
		Call: ag.ToolCall{ID: "call-1", Name: "deploy", Args: json.RawMessage(`{}`)}}
	text := func(text string) ag.Message {
		return ag.Message{Role: ag.RoleUser, Content: []ag.ContentBlock{ag.TextBlock(text)}}
	}
	for _, next := range []string{"message", "tool call"} {
		t.Run(next, func(t *testing.T) {
			// Given a run whose renewals cannot save it (a minute apart), one message committed
			ctx := context.Background()
			st := memory.New()
			f := newFixture(t, st, agentgo.Options{LeaseTTL: time.Minute})
			stale, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1"})
			if err != nil {
				t.Fatal(err)
			}
			restored(t, stale, ag.RunKindPrompt)
			if err := stale.CommitMessage(text("before")); err != nil {
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
			restored(t, resumed, ag.RunKindContinue)
			// Then the stopped process's next write is refused, and its run halts
			ran := false
			if next == "message" {
				err = stale.CommitMessage(text("zombie"))
				var lost *model.LeaseLostError
				if !errors.As(err, &lost) || lost.Token != resumed.Fence().Token {
					t.Fatalf("the stale commit returned %v, want the store's LeaseLost naming token %d", err, resumed.Fence().Token)
				}
			} else {
				_, err = f.lg.ToolMiddleware()(stale.Context(ctx), deploy, func(context.Context, ag.ToolExecution) (ag.ToolResult, error) {
					ran = true
					return ag.ToolResult{}, nil
				})
			}
			if !errors.Is(err, agent.ErrLeaseLost) || !errors.Is(stale.Halted(), agent.ErrLeaseLost) || ran {
				t.Fatalf("the stale %s: %v (halted: %v, the tool ran: %v)", next, err, stale.Halted(), ran)
			}
			if err := stale.Finish(ctx, nil); !errors.Is(err, agent.ErrLeaseLost) {
				t.Fatalf("the stale run's Finish: %v", err)
			}
			// And nothing of it is stored, while the new holder commits on
			if err := resumed.CommitMessage(text("heir")); err != nil {
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
