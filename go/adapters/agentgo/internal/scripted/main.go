// Command scripted is an AgentGo agent with a scripted model on a ledger, wired as the
// adapter's documentation shows, for the tests that kill it and resume it from another
// process (tests/adapters/test_agentgo.py).
//
//	scripted -url URL -prefix P -session S -run R -marks DIR [-resume] [-hang POINT]
//
// The model asks for lookup and research (a subagent, a child run), then deploy, then
// answers. Each provider call appends a line to DIR/model, each tool run one to DIR/<tool>.
// With -hang the process prints {"inside": POINT} and waits to be killed at POINT: "model"
// (the provider asked for deploy's turn, its reply not yet recorded), "reply" (that reply
// recorded, not yet committed), "between" (lookup's outcome recorded, research not begun),
// or "deploy" (inside deploy). It prints {"answer": ..., "messages": n} when the run ends
// well, {"error": <kind>, "message": ...} (exit 1) when it does not.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	ag "github.com/compforge/agentgo"

	ledgerbus "github.com/ledger-bus/ledger-bus/go"
	agentledger "github.com/ledger-bus/ledger-bus/go/adapters/agentgo"
	"github.com/ledger-bus/ledger-bus/go/adapters/agentgo/internal/script"
	"github.com/ledger-bus/ledger-bus/go/agent"
)

type settings struct {
	url, prefix, session, run, marks, hang string
	resume                                 bool
	lease                                  time.Duration
}

func main() {
	var s settings
	flag.StringVar(&s.url, "url", "", "the store's URL")
	flag.StringVar(&s.prefix, "prefix", "", "the key prefix")
	flag.StringVar(&s.session, "session", "s", "the ledger session")
	flag.StringVar(&s.run, "run", "r1", "the run id")
	flag.StringVar(&s.marks, "marks", "", "the folder each provider call and tool run is marked in")
	flag.StringVar(&s.hang, "hang", "", "where to wait to be killed: model, reply, between or deploy")
	flag.BoolVar(&s.resume, "resume", false, "resume the run")
	flag.DurationVar(&s.lease, "lease", 300*time.Millisecond, "the run's lease")
	flag.Parse()
	out := json.NewEncoder(os.Stdout)
	if err := run(context.Background(), s, out); err != nil {
		_ = out.Encode(map[string]string{"error": agent.Name(err), "message": err.Error()})
		os.Exit(1)
	}
}

var usage = ag.Usage{Model: "scripted-1", Input: 100, Output: 20, CacheRead: 64, Cost: &ag.Cost{Total: 0.0012}}

// run is the documented wiring: a ledger, a run, the agent with the adapter's five hooks, a
// prompt (or, resumed, Continue), and the run's end.
func run(ctx context.Context, s settings, out *json.Encoder) (err error) {
	st, err := ledgerbus.Connect(ctx, s.url, ledgerbus.WithPrefix(s.prefix))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	lg, err := agentledger.New(st, s.session, agentledger.Options{Model: "scripted-1", LeaseTTL: s.lease, SafeToReplay: []string{"lookup"}})
	if err != nil {
		return err
	}
	r, err := lg.Start(ctx, agentledger.RunOptions{RunID: s.run, Resume: s.resume, LeaseWait: 10 * time.Second})
	if err != nil {
		return err
	}
	k := killer{point: s.hang, out: out}
	model := &script.Model{Replies: []ag.Message{
		script.Reply("", usage, [2]string{"lookup", `{"service":"api"}`}, [2]string{"research", `{"q":"is 1.4.2 safe?"}`}),
		// Call ids count within a reply, as providers' do: deploy is call-1 as lookup was.
		script.Reply("", usage, [2]string{"deploy", `{"env":"prod"}`}),
		script.Reply("deployed api 1.4.2 to prod", usage),
	}, Before: func(ctx context.Context, index int) error {
		if err := mark(s.marks, "model"); err != nil {
			return err
		}
		if index == 1 {
			k.at(ctx, "model")
		}
		return nil
	}}
	tools := []ag.Tool{
		marked(s.marks, "lookup", func(context.Context) (json.RawMessage, error) {
			return json.RawMessage(`{"version":"1.4.2"}`), nil
		}),
		marked(s.marks, "research", func(ctx context.Context) (json.RawMessage, error) { return research(ctx, lg) }),
		marked(s.marks, "deploy", func(ctx context.Context) (json.RawMessage, error) {
			k.at(ctx, "deploy")
			return json.RawMessage(`{"deployed":true}`), nil
		}),
	}
	a := ag.NewAgent(ag.WithModel(model), ag.WithTools(tools...), ag.WithMaxRetries(1),
		ag.WithModelMiddlewares(k.afterReply, lg.ModelMiddleware()),
		ag.WithToolMiddlewares(k.betweenTools, lg.ToolMiddleware()),
		ag.WithMessageCommitter(r.CommitMessage),
		ag.WithBeforeRun(r.Restore),
		ag.WithAfterRun(r.Ended))
	ctx = r.Context(ctx)
	if s.resume {
		err = a.Continue(ctx)
	} else {
		err = a.Prompt(ctx, "deploy the api")
	}
	a.WaitForIdle()
	if err := r.Finish(ctx, err); err != nil {
		return err
	}
	msgs := a.Messages()
	return out.Encode(map[string]any{"answer": msgs[len(msgs)-1].TextContent(), "messages": len(msgs)})
}

// research runs a subagent in a child run, as AgentGo's subagent tool runs one.
func research(ctx context.Context, lg *agentledger.Ledger) (json.RawMessage, error) {
	child, err := lg.Start(ctx, agentledger.RunOptions{})
	if err != nil {
		return nil, err
	}
	sub := ag.NewAgent(ag.WithModel(&script.Model{Replies: []ag.Message{script.Reply("1.4.2 has no known issues", usage)}}),
		ag.WithModelMiddlewares(lg.ModelMiddleware()),
		ag.WithToolMiddlewares(lg.ToolMiddleware()),
		ag.WithMessageCommitter(child.CommitMessage),
		ag.WithBeforeRun(child.Restore),
		ag.WithAfterRun(child.Ended))
	err = sub.Prompt(child.Context(ctx), "is 1.4.2 safe?")
	sub.WaitForIdle()
	if err := child.Finish(ctx, err); err != nil {
		return nil, err
	}
	msgs := sub.Messages()
	return json.Marshal(msgs[len(msgs)-1].TextContent())
}

// killer waits to be killed at one point of the run.
type killer struct {
	point string
	out   *json.Encoder
}

// at waits to be killed when point is the killer's.
func (k killer) at(ctx context.Context, point string) {
	if k.point != point {
		return
	}
	_ = k.out.Encode(map[string]string{"inside": point})
	<-ctx.Done() // until killed
}

// afterReply, outermost of the model middlewares, waits once deploy's turn has its reply
// recorded (the adapter's middleware inside it returned).
func (k killer) afterReply(ctx context.Context, exec ag.ModelExecution, next ag.ModelExecuteFunc) (ag.ModelResult, error) {
	result, err := next(ctx, exec)
	if err == nil && exec.TurnIndex == 2 {
		k.at(ctx, "reply")
	}
	return result, err
}

// betweenTools, outermost of the tool middlewares, waits before research: lookup, before it
// in the batch, has its outcome recorded.
func (k killer) betweenTools(ctx context.Context, exec ag.ToolExecution, next ag.ToolExecuteFunc) (ag.ToolResult, error) {
	if exec.Call.Name == "research" {
		k.at(ctx, "between")
	}
	return next(ctx, exec)
}

// marked is a tool that marks each of its runs in the folder.
func marked(folder, name string, fn func(context.Context) (json.RawMessage, error)) ag.Tool {
	return ag.NewFuncTool(name, name, nil, func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		if err := mark(folder, name); err != nil {
			return nil, err
		}
		return fn(ctx)
	})
}

// mark appends a line to the folder's file of what.
func mark(folder, what string) error {
	f, err := os.OpenFile(filepath.Join(folder, what), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, time.Now().UTC().Format(time.RFC3339Nano))
	return errors.Join(err, f.Close())
}
