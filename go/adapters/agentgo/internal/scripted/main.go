// Command scripted is an AgentGo agent with a scripted model on a ledger, for the tests that
// kill it inside a tool and resume it from another process (tests/adapters/test_agentgo.py).
//
//	scripted -url URL -prefix P -session S -run R [-resume] [-hang] -marks FILE
//
// The model asks for lookup and research (a subagent, a child run), then deploy, then
// answers. Each time deploy runs it appends a line to FILE; with -hang it then prints
// {"inside": "<deploy's attempt>"} and waits to be killed. It prints {"answer": ...} when the
// run ends well, {"error": <kind>, "message": ...} (exit 1) when it does not.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	ledgerbus "github.com/ledger-bus/ledger-bus/go"
	"github.com/ledger-bus/ledger-bus/go/adapters/agentgo"
	"github.com/ledger-bus/ledger-bus/go/adapters/agentgo/internal/loop"
	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
)

type settings struct {
	url, prefix, session, run, marks string
	resume, hang                     bool
	lease                            time.Duration
}

func main() {
	var s settings
	flag.StringVar(&s.url, "url", "", "the store's URL")
	flag.StringVar(&s.prefix, "prefix", "", "the key prefix")
	flag.StringVar(&s.session, "session", "s", "the ledger session")
	flag.StringVar(&s.run, "run", "r1", "the run id")
	flag.StringVar(&s.marks, "marks", "", "the file deploy marks each run in")
	flag.BoolVar(&s.resume, "resume", false, "resume the run")
	flag.BoolVar(&s.hang, "hang", false, "hang inside deploy")
	flag.DurationVar(&s.lease, "lease", 300*time.Millisecond, "the run's lease")
	flag.Parse()
	out := json.NewEncoder(os.Stdout)
	if err := run(context.Background(), s, out); err != nil {
		name := agent.Name(err)
		if name == "" {
			name = model.Name(err)
		}
		_ = out.Encode(map[string]string{"error": name, "message": err.Error()})
		os.Exit(1)
	}
}

var usage = agentgo.Usage{Model: "scripted-1", Input: 100, Output: 20, CacheRead: 64, Cost: &agentgo.Cost{Total: 0.0012}}

func run(ctx context.Context, s settings, out *json.Encoder) (err error) {
	st, err := ledgerbus.Connect(ctx, s.url, ledgerbus.WithPrefix(s.prefix))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, st.Close()) }()
	lg, err := agentgo.New(st, s.session, agentgo.Options{Model: "scripted-1", LeaseTTL: s.lease, SafeToReplay: []string{"lookup"}})
	if err != nil {
		return err
	}
	r, err := lg.Start(ctx, agentgo.RunOptions{RunID: s.run, Resume: s.resume, LeaseWait: 10 * time.Second})
	if err != nil {
		return err
	}
	deploy := loop.Func{ToolName: "deploy", Fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		if err := mark(s.marks); err != nil {
			return nil, err
		}
		if s.hang {
			_ = out.Encode(map[string]string{"inside": s.run + "/tool/t1/call-1#1"})
			<-ctx.Done() // until killed
		}
		return json.RawMessage(`{"deployed":true}`), nil
	}}
	a := newAgent(lg, r, []agentgo.Message{
		loop.Reply("", usage, "", [2]string{"lookup", `{"service":"api"}`}, [2]string{"research", `{"q":"is 1.4.2 safe?"}`}),
		// Call ids count within a reply, as providers' do: deploy is call-1 as lookup was.
		loop.Reply("", usage, "", [2]string{"deploy", `{"env":"prod"}`}),
		loop.Reply("deployed api 1.4.2 to prod", usage, ""),
	}, lookup, research(lg), deploy)
	ctx = r.Context(ctx)
	if s.resume {
		var messages []agentgo.Message
		if messages, err = r.Messages(ctx); err == nil {
			a.SetMessages(messages)
			err = a.Continue(ctx)
		}
	} else {
		err = a.Run(ctx, "deploy the api")
	}
	if err := errors.Join(err, r.Finish(ctx, err)); err != nil {
		return err
	}
	msgs := a.Messages()
	return out.Encode(map[string]any{"answer": msgs[len(msgs)-1].TextContent(), "messages": len(msgs)})
}

func newAgent(lg *agentgo.Ledger, r *agentgo.Run, replies []agentgo.Message, tools ...loop.Tool) *loop.Agent {
	return &loop.Agent{
		Model:            &loop.Scripted{Replies: replies},
		Tools:            tools,
		ModelMiddlewares: []agentgo.ModelMiddleware{lg.ModelMiddleware()},
		ToolMiddlewares:  []agentgo.ToolMiddleware{lg.ToolMiddleware()},
		Committer:        r.CommitMessage,
		MaxRetries:       1,
	}
}

var lookup = loop.Func{ToolName: "lookup", Fn: func(context.Context, json.RawMessage) (json.RawMessage, error) {
	return json.RawMessage(`{"version":"1.4.2"}`), nil
}}

// research runs a subagent in a child run, as AgentGo's subagent tool runs one.
func research(lg *agentgo.Ledger) loop.Tool {
	return loop.Func{ToolName: "research", Fn: func(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
		child, err := lg.Start(ctx, agentgo.RunOptions{})
		if err != nil {
			return nil, err
		}
		sub := newAgent(lg, child, []agentgo.Message{loop.Reply("1.4.2 has no known issues", usage, "")})
		err = sub.Run(child.Context(ctx), "is 1.4.2 safe?")
		if err := errors.Join(err, child.Finish(ctx, err)); err != nil {
			return nil, err
		}
		msgs := sub.Messages()
		return json.Marshal(msgs[len(msgs)-1].TextContent())
	}}
}

// mark appends a line to the file deploy marks its runs in.
func mark(path string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(f, time.Now().UTC().Format(time.RFC3339Nano))
	return errors.Join(err, f.Close())
}
