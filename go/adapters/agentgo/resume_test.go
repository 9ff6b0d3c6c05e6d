package agentgo_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	ag "github.com/compforge/agentgo"

	"github.com/ledger-bus/ledger-bus/go/adapters/agentgo"
	"github.com/ledger-bus/ledger-bus/go/adapters/agentgo/internal/script"
	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store/memory"
)

// provider answers as a real provider does: a tool call's arguments in the order the model
// wrote them, and call ids new in every reply.
type provider struct{ n atomic.Int32 }

func (p *provider) Generate(_ context.Context, msgs []ag.Message, _ []ag.ToolSpec, _ ...ag.CallOption) (*ag.LLMResponse, error) {
	id := fmt.Sprintf("toolu_%d", p.n.Add(1))
	replies := 0
	for _, msg := range msgs {
		if msg.Role == ag.RoleAssistant {
			replies++
		}
	}
	asked := map[int][2]string{0: {"lookup", `{"service":"api","env":"prod","replicas":3.0}`}, 1: {"deploy", `{"é":"\u00e9"}`}}
	call, ok := asked[replies]
	if !ok {
		return &ag.LLMResponse{Message: script.Reply("done", usage2)}, nil
	}
	reply := script.Reply("", usage1)
	reply.StopReason = ag.StopReasonToolUse
	reply.Content = []ag.ContentBlock{ag.ToolCallBlock(ag.ToolCall{ID: id, Name: call[0], Args: json.RawMessage(call[1])})}
	return &ag.LLMResponse{Message: reply}, nil
}

func (p *provider) GenerateStream(context.Context, []ag.Message, []ag.ToolSpec, ...ag.CallOption) (<-chan ag.StreamEvent, error) {
	return nil, errors.New("not streamed")
}

func (p *provider) SupportsTools() bool { return true }

func TestAResumedRunAsksUnderTheDigestTheOriginalAskedUnder(t *testing.T) {
	// The ledger gives a reply's arguments back as JSON it reads them (keys sorted, 3.0 as 3,
	// escapes undone): the next turn's request, made of them, must be the one the original
	// run asked, or the recorded reply is not found, the provider is asked again, and its new
	// call ids no longer match the conversation the ledger holds.
	for _, point := range []string{"deploy's reply recorded", "inside deploy"} {
		t.Run(point, func(t *testing.T) {
			st := memory.New()
			opts := agentgo.Options{LeaseTTL: 300 * time.Millisecond, SafeToReplay: []string{"deploy"}}
			f := newFixture(t, st, opts)
			inside, wait := stuck(t)
			kill := []ag.AgentOption{ag.WithModel(&provider{})}
			if point == "inside deploy" {
				f.deploy = func(context.Context) (json.RawMessage, error) {
					wait()
					return nil, errors.New("never answered")
				}
			} else {
				after := func(ctx context.Context, exec ag.ModelExecution, next ag.ModelExecuteFunc) (ag.ModelResult, error) {
					result, err := next(ctx, exec)
					if exec.TurnIndex == 2 {
						wait()
					}
					return result, err
				}
				kill = append(kill, ag.WithModelMiddlewares(after, f.lg.ModelMiddleware()))
			}
			killedAt(t, f, inside, kill...)

			g := newFixture(t, st, opts)
			again := &provider{}
			again.n.Store(100)
			if _, a, err := g.resume(t, ag.WithModel(again)); err != nil || last(a) != "done" {
				t.Fatalf("resumed: %v; %s", err, asJSON(t, a.Messages()))
			}
			if asked := again.n.Load() - 100; asked != 1 {
				t.Fatalf("the provider was asked %d times on resume, want once (the answer)", asked)
			}
		})
	}
}

func TestARetryOnAResumedRunIsANewAttempt(t *testing.T) {
	ctx := context.Background()
	st := memory.New()
	opts := agentgo.Options{LeaseTTL: 300 * time.Millisecond}
	f := newFixture(t, st, opts)
	f.model.Before = func(context.Context, int) error { return script.Retryable{Err: errors.New("503 overloaded")} }
	run, err := f.lg.Start(ctx, agentgo.RunOptions{RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := prompt(ctx, run, f.agent(run), "deploy the api"); err == nil {
		t.Fatal("the run went on with its provider down")
	}
	// Resumed, the first attempt fails once more and AgentGo retries: four attempts on record
	// already, the fifth and sixth are new.
	g := newFixture(t, st, opts)
	var asked atomic.Int32
	g.model.Before = func(context.Context, int) error {
		if asked.Add(1) == 1 {
			return script.Retryable{Err: errors.New("503 overloaded")}
		}
		return nil
	}
	if _, _, err := g.resume(t); err != nil {
		t.Fatal(err)
	}
	requested := map[string]int{}
	for _, e := range events(t, st, "run-r1") {
		if e.Type() == model.TypeToolCall && e.Fields["tool"] == agent.ModelTool {
			requested[requestDigest.ReplaceAllString(fmt.Sprint(e.Fields["attempt_id"]), "")]++
		}
	}
	for id, n := range requested {
		if n > 1 {
			t.Errorf("attempt %s requested %d times", id, n)
		}
	}
	if got := results(t, st, "run-r1", agent.ModelTool); len(got) != 6 || got[4] != "r1/model/model-1.5#1 ok" {
		t.Fatalf("the model calls: %q", got)
	}
}

func TestAnAnswerCutAtItsLengthEndsAResumedRunWell(t *testing.T) {
	for _, stop := range []ag.StopReason{ag.StopReasonLength, ag.StopReasonSafety} {
		t.Run(string(stop), func(t *testing.T) {
			st := memory.New()
			opts := agentgo.Options{LeaseTTL: 300 * time.Millisecond}
			f := newFixture(t, st, opts)
			f.model.Replies[1].StopReason = stop
			inside, wait := stuck(t)
			killedAt(t, f, inside, ag.WithAfterRun(func(context.Context, ag.AfterRunContext) error {
				wait()
				return nil
			}))
			g := newFixture(t, st, opts)
			g.model.Replies = f.model.Replies
			if _, _, err := g.resume(t); err != nil || g.model.Calls() != 0 {
				t.Fatalf("the resumed run, its answer committed: %v (model asked %d times)", err, g.model.Calls())
			}
		})
	}
}

func TestSubagentsOfCallsWithOneIDInTwoTurnsHaveRunsOfTheirOwn(t *testing.T) {
	ctx := context.Background()
	lg, err := agentgo.New(memory.New(), "s", agentgo.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var children []string
	research := ag.NewFuncTool("research", "", nil, func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		child, err := lg.Start(ctx, agentgo.RunOptions{})
		if err != nil {
			return nil, err
		}
		children = append(children, child.ID())
		return json.RawMessage(`"x"`), child.Finish(ctx, nil)
	})
	run, err := lg.Start(ctx, agentgo.RunOptions{RunID: "lead"})
	if err != nil {
		t.Fatal(err)
	}
	a := ag.NewAgent(ag.WithModel(&script.Model{Replies: []ag.Message{
		script.Reply("", ag.Usage{}, [2]string{"research", `{"q":1}`}),
		script.Reply("", ag.Usage{}, [2]string{"research", `{"q":2}`}),
		script.Reply("ok", ag.Usage{}),
	}}), ag.WithTools(research),
		ag.WithModelMiddlewares(lg.ModelMiddleware()), ag.WithToolMiddlewares(lg.ToolMiddleware()),
		ag.WithMessageCommitter(run.CommitMessage), ag.WithBeforeRun(run.Restore), ag.WithAfterRun(run.Ended))
	if err := prompt(ctx, run, a, "go"); err != nil {
		t.Fatal(err)
	}
	if want := []string{"lead.t1.call-1", "lead.t2.call-1"}; fmt.Sprint(children) != fmt.Sprint(want) {
		t.Fatalf("the subagents' runs: %q, want %q", children, want)
	}
}
