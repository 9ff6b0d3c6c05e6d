package agent_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/internal/drill"
	"github.com/ledger-bus/ledger-bus/go/internal/testredis"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
	"github.com/ledger-bus/ledger-bus/go/store/redisstore"
)

// TestMain serves a fencing drill when this binary was started again as one of its processes
// (internal/drill), and runs the tests otherwise.
func TestMain(m *testing.M) {
	if cfg, ok := drill.Child(); ok {
		serveRecorder(cfg)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveRecorder is a drill's process: a recorder whose runs the drill starts, writes and ends.
func serveRecorder(cfg drill.Config) {
	ctx := context.Background()
	s, err := redisstore.Open(ctx, cfg.URL)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer s.Close()
	rec, err := agent.NewRecorder(s, cfg.Session, "coder", agent.RecorderOptions{LeaseTTL: cfg.Lease})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	runs := map[string]*agent.Run{}
	drill.Serve(func(req drill.Request) drill.Reply {
		var err error
		ran := false
		switch run := runs[req.Run]; {
		case req.Op == "start":
			runs[req.Run], err = rec.Start(ctx, agent.RunOptions{RunID: req.Run, Resume: req.Resume, LeaseWait: 10 * time.Second})
		case run == nil:
			err = model.Errorf(model.ErrInvalidInput, "no run %s here", req.Run)
		case req.Op == "write" && req.Kind == "tool":
			_, err = run.Call(ctx, "deploy", map[string]any{"text": req.Text}, func(context.Context) (any, error) {
				ran = true
				return "deployed", nil
			})
		case req.Op == "write":
			_, err = run.Message(ctx, req.Text)
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

func TestARecorderStoppedPastItsLeaseWritesNothingMore(t *testing.T) {
	server := testredis.Start(t)
	check := openRedis(t, server.URL)
	for _, takeover := range []bool{false, true} {
		t.Run(map[bool]string{false: "nobody took over", true: "taken over"}[takeover], func(t *testing.T) {
			t.Parallel()
			// Given a process whose runs hold a lease of 250ms, and another whose lease outlasts a round
			session := fmt.Sprintf("drill-%v", takeover)
			zombie := drill.Spawn(t, "zombie", drill.Config{URL: server.URL, Session: session, Lease: 400 * time.Millisecond})
			heir := drill.Spawn(t, "heir", drill.Config{URL: server.URL, Session: session, Lease: 10 * time.Second})
			// When each round stops the first past its lease, its next write queued (a message,
			// or a tool's call), Then that write is refused and nothing of it is stored
			result := drill.Run(t, drill.Fencing{
				Zombie: zombie, Heir: heir, Rounds: 50, Takeover: takeover, Pause: 550 * time.Millisecond,
				Writes: []string{"message", "tool"},
				Record: func(t testing.TB, run string) []string { return record(t, check, session, "run-"+run) },
			})
			t.Log(result)
			if result.Refused != result.Rounds || result.Landed != 0 {
				t.Errorf("%s", result)
			}
		})
	}
}

// record describes each event of a stream: its type, its kind or its tool, and its body or
// arguments.
func record(t testing.TB, s *redisstore.Store, session, name string) []string {
	t.Helper()
	stream, err := model.NewStreamID(session, name)
	if err != nil {
		t.Fatal(err)
	}
	events, err := s.ReadStream(context.Background(), stream, store.ReadStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lines := make([]string, len(events))
	for i, e := range events {
		lines[i] = fmt.Sprintf("%s v%d %s %v %v %v", name, e.Version, e.Type(), e.Fields["kind"], e.Fields["tool"], e.Fields["body"])
		if args, ok := e.Fields["args"]; ok {
			lines[i] += fmt.Sprintf(" %v", args)
		}
	}
	return lines
}
