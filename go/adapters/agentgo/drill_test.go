package agentgo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	ag "github.com/compforge/agentgo"

	"github.com/ledger-bus/ledger-bus/go/adapters/agentgo"
	"github.com/ledger-bus/ledger-bus/go/internal/drill"
	"github.com/ledger-bus/ledger-bus/go/internal/testredis"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
	"github.com/ledger-bus/ledger-bus/go/store/redisstore"
)

// TestMain serves a fencing drill when this binary was started again as one of its processes
// (the SDK's internal/drill), and runs the tests otherwise.
func TestMain(m *testing.M) {
	if cfg, ok := drill.Child(); ok {
		serveAgent(cfg)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveAgent is a drill's process: an AgentGo agent's ledger whose runs the drill starts,
// gives messages to commit and tool calls to run, and ends, through the adapter's committer
// and tool middleware as AgentGo calls them.
func serveAgent(cfg drill.Config) {
	ctx := context.Background()
	st, err := redisstore.Open(ctx, cfg.URL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer st.Close()
	lg, err := agentgo.New(st, cfg.Session, agentgo.Options{Model: "scripted-1", LeaseTTL: cfg.Lease})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tools := lg.ToolMiddleware()
	runs := map[string]*agentgo.Run{}
	drill.Serve(func(req drill.Request) drill.Reply {
		var err error
		ran := false
		switch run := runs[req.Run]; {
		case req.Op == "start":
			// Started, and restored as AgentGo's BeforeRun restores a run before its first commit.
			var started *agentgo.Run
			started, err = lg.Start(ctx, agentgo.RunOptions{RunID: req.Run, Resume: req.Resume, LeaseWait: 10 * time.Second})
			if err == nil {
				kind := map[bool]ag.RunKind{false: ag.RunKindPrompt, true: ag.RunKindContinue}[req.Resume]
				_, err = started.Restore(ctx, ag.BeforeRunContext{Kind: kind})
				runs[req.Run] = started
			}
		case run == nil:
			err = model.Errorf(model.ErrInvalidInput, "no run %s here", req.Run)
		case req.Op == "write" && req.Kind == "tool":
			args, _ := json.Marshal(map[string]string{"text": req.Text})
			call := ag.ToolExecution{Execution: ag.Execution{ID: req.Text, Kind: ag.ExecutionKindTool, TurnIndex: 1},
				Call: ag.ToolCall{ID: req.Text, Name: "deploy", Args: args}}
			_, err = tools(run.Context(ctx), call, func(context.Context, ag.ToolExecution) (ag.ToolResult, error) {
				ran = true
				return ag.ToolResult{ToolCallID: req.Text, Content: json.RawMessage(`"deployed"`)}, nil
			})
		case req.Op == "write":
			err = run.CommitMessage(ag.UserMsg(req.Text))
		case req.Op == "end":
			delete(runs, req.Run)
			err = run.Finish(ctx, nil)
		default:
			err = model.Errorf(model.ErrInvalidInput, "unknown op %s", req.Op)
		}
		if err != nil {
			reply := drill.Failed(err)
			reply.Ran = ran
			return reply
		}
		return drill.Reply{OK: true}
	})
}

func TestAnAgentStoppedPastItsLeaseCommitsNothingMore(t *testing.T) {
	server := testredis.Start(t)
	check, err := redisstore.Open(context.Background(), server.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = check.Close() })
	for _, takeover := range []bool{false, true} {
		t.Run(map[bool]string{false: "nobody took over", true: "taken over"}[takeover], func(t *testing.T) {
			t.Parallel()
			// Given an agent's process whose runs hold a lease of 250ms, and another whose lease
			// outlasts a round
			session := fmt.Sprintf("drill-%v", takeover)
			zombie := drill.Spawn(t, "zombie", drill.Config{URL: server.URL, Session: session, Lease: 400 * time.Millisecond})
			heir := drill.Spawn(t, "heir", drill.Config{URL: server.URL, Session: session, Lease: 10 * time.Second})
			// When each round stops the first past its lease, AgentGo's next step queued (a
			// message to commit, or a tool call), Then it is refused, and nothing of it is
			// stored in either of the run's streams
			result := drill.Run(t, drill.Fencing{
				Zombie: zombie, Heir: heir, Rounds: 50, Takeover: takeover, Pause: 550 * time.Millisecond,
				Writes: []string{"message", "tool"},
				Record: func(t testing.TB, run string) []string {
					return append(streamRecord(t, check, session, "run-"+run), streamRecord(t, check, session, agentgo.NativePrefix+run)...)
				},
			})
			t.Log(result)
			if result.Refused != result.Rounds || result.Landed != 0 {
				t.Errorf("%s", result)
			}
		})
	}
}

// streamRecord describes each event of a stream: its type, kind, tool, and what it carries (a
// message's body, a call's arguments, AgentGo's message whole).
func streamRecord(t testing.TB, st store.Log, session, name string) []string {
	t.Helper()
	stream, err := model.NewStreamID(session, name)
	if err != nil {
		t.Fatal(err)
	}
	events, err := st.ReadStream(context.Background(), stream, store.ReadStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lines := make([]string, len(events))
	for i, e := range events {
		lines[i] = fmt.Sprintf("%s v%d %s %v %v %v %v %v", name, e.Version, e.Type(), e.Fields["kind"], e.Fields["tool"],
			e.Fields["body"], e.Fields["args"], e.Fields["message"])
	}
	return lines
}
