// Command peer is a Go process of the SDK driven by another, for the cross-language tests
// (tests/contract/test_sdk_interop.py): one JSON request a line on stdin, one JSON reply a line
// on stdout, so that a Python test can have it append, read and be killed mid-run.
//
//	peer URL PREFIX
//
// Requests: {"op": "append", "session", "stream", "expected", "append_id", "events", and
// optionally "fence": {"lease", "owner", "token"}, the lease holding it is made under},
// {"op": "lease", "session", "step" (acquire, renew or release), "name", "owner", "ttl_ms"}
// (the holding's token, 1 for a release, 0 when not held),
// {"op": "burst", "session", "stream", "count"} (appends one at a time, as fast as it can),
// {"op": "ping"} (answered once connected), {"op": "scan", "session"}, {"op": "tail", "session",
// "n"}, {"op": "digest", "events"}, {"op": "hang_in_tool", "session", "run_id", "tool", "args",
// "lease_ms"} (replied to once the call's request is committed; the tool never returns),
// {"op": "resume_call", ...the same} (the run resumed: the call's recorded outcome, or the error
// that stops it); a run held open across requests, as the Node peer holds one (a fencing
// drill's): {"op": "run_start", "session", "run_id", "lease_ms", "resume"} (its version),
// {"op": "run_message", "run_id", "body"} (its version after it), {"op": "run_finish",
// "run_id"}; the exactly-once drill's agent: {"op": "pay", "session", "run_id", "lease_ms",
// "payments", "amount", "kill_at"}. Replies: {"ok": ...} or {"error": <the error's kind>, "message": ...}, the
// same as the Node peer's.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"time"

	ledgerbus "github.com/ledger-bus/ledger-bus/go"
	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

type request map[string]any

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: peer URL PREFIX")
		os.Exit(2)
	}
	ctx := context.Background()
	s, err := ledgerbus.Connect(ctx, os.Args[1], ledgerbus.WithPrefix(os.Args[2]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(model.ExitCode(err))
	}
	defer s.Close()
	p := &peer{store: s, runs: map[string]*agent.Run{}}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var reply map[string]any
		value, err := p.handle(ctx, in.Bytes())
		if err != nil {
			name := agent.Name(err)
			if name == "" {
				name = fmt.Sprintf("%T", errors.Unwrap(err))
			}
			reply = map[string]any{"error": name, "message": err.Error()}
		} else {
			reply = map[string]any{"ok": value}
		}
		if err := out.Encode(reply); err != nil {
			os.Exit(1)
		}
	}
}

type peer struct {
	store store.EventStore
	// runs are the runs held open (run_start), by run id.
	runs map[string]*agent.Run
}

func (p *peer) handle(ctx context.Context, line []byte) (any, error) {
	var decoded map[string]any
	decoder := json.NewDecoder(bytes.NewReader(line))
	decoder.UseNumber()
	if err := decoder.Decode(&decoded); err != nil {
		return nil, err
	}
	// Numbers as a writer's Go values: an integer literal as int64, any other as float64, so
	// that an event read from a request is stored as Python stores it.
	r := request(model.ReadNumbers(decoded).(map[string]any))
	session, _ := r["session"].(string)
	switch r["op"] {
	case "ping":
		_, err := p.store.StreamVersion(ctx, model.StreamID{Session: "ping", Name: "ping"})
		return "pong", err
	case "append":
		stream, err := model.NewStreamID(session, r["stream"].(string))
		if err != nil {
			return nil, err
		}
		expected := model.AnyVersion
		if v, ok := r["expected"].(int64); ok {
			expected = v
		}
		var opts []store.AppendOption
		if f, ok := r["fence"].(map[string]any); ok {
			lease, _ := f["lease"].(string)
			owner, _ := f["owner"].(string)
			token, _ := f["token"].(int64)
			opts = append(opts, store.WithFence(model.Fence{Lease: lease, Owner: owner, Token: token}))
		}
		result, err := p.store.Append(ctx, stream, expected, r["append_id"].(string), events(r["events"]), opts...)
		if err != nil {
			return nil, err
		}
		return appendLine(result), nil
	case "lease":
		name, _ := r["name"].(string)
		owner, _ := r["owner"].(string)
		step, _ := r["step"].(string)
		ms, _ := r["ttl_ms"].(int64)
		return p.store.Lease(ctx, store.LeaseStep(step), session, name, owner, time.Duration(ms)*time.Millisecond)
	case "burst":
		stream, err := model.NewStreamID(session, r["stream"].(string))
		if err != nil {
			return nil, err
		}
		count := r["count"].(int64)
		results := make([]any, 0, count)
		for i := range count {
			event := model.Message("go", fmt.Sprintf("go %d", i))
			result, err := p.store.Append(ctx, stream, i, fmt.Sprintf("go-%d", i), []model.Event{event})
			if err != nil {
				return nil, err
			}
			results = append(results, appendLine(result))
		}
		return results, nil
	case "scan":
		var found []model.RecordedEvent
		for event, err := range p.store.Session(ctx, session, store.IterOptions{}) {
			if err != nil {
				return nil, err
			}
			found = append(found, event)
		}
		return orEmpty(found), nil
	case "tail":
		found, err := p.store.Tail(ctx, session, store.TailOptions{N: int(r["n"].(int64))})
		return orEmpty(found), err
	case "digest":
		prepared, err := model.PrepareAppend(model.StreamID{Session: "s", Name: "x"}, "a", events(r["events"]), model.DefaultLimits())
		return prepared.Digest, err
	case "hang_in_tool":
		return p.hangInTool(ctx, session, r)
	case "resume_call":
		return p.resumeCall(ctx, session, r)
	case "run_start", "run_message", "run_finish":
		return p.openRun(ctx, session, r)
	case "pay":
		return p.pay(ctx, session, r)
	}
	return nil, fmt.Errorf("unknown op %v", r["op"])
}

func events(value any) []model.Event {
	items, _ := value.([]any)
	found := make([]model.Event, 0, len(items))
	for _, item := range items {
		fields, _ := item.(map[string]any)
		found = append(found, model.Event(fields))
	}
	return found
}

func orEmpty(events []model.RecordedEvent) []model.RecordedEvent {
	if events == nil {
		return []model.RecordedEvent{}
	}
	return events
}

// appendLine is an append's result as `ledger-bus append -o jsonl` writes it.
func appendLine(result model.AppendResult) map[string]any {
	return map[string]any{
		"session":       result.Stream.Session,
		"stream":        result.Stream.Name,
		"first_version": result.FirstVersion,
		"last_version":  result.LastVersion,
		"cursor":        result.Cursor,
		"deduplicated":  result.Deduplicated,
	}
}

// recorder is a recorder of the agent "go-agent" in session, with the request's lease.
func (p *peer) recorder(session string, r request) (*agent.Recorder, error) {
	lease, _ := r["lease_ms"].(int64)
	return agent.NewRecorder(p.store, session, "go-agent", agent.RecorderOptions{
		LeaseTTL: time.Duration(lease) * time.Millisecond,
	})
}

// hangInTool starts a run that calls a tool which never returns: it replies once the call's
// request is committed, so that the test can kill the process inside the tool.
func (p *peer) hangInTool(ctx context.Context, session string, r request) (any, error) {
	recorder, err := p.recorder(session, r)
	if err != nil {
		return nil, err
	}
	run, err := recorder.Start(ctx, agent.RunOptions{RunID: r["run_id"].(string)})
	if err != nil {
		return nil, err
	}
	args, _ := r["args"].(map[string]any)
	begun, err := run.BeginCall(ctx, r["tool"].(string), args)
	if err != nil {
		return nil, err
	}
	return begun.Attempt.AttemptID, nil
}

// resumeCall resumes the run and calls the tool again: the call's recorded or resolved
// outcome, and whether the tool ran; or the error that stops the run.
func (p *peer) resumeCall(ctx context.Context, session string, r request) (any, error) {
	recorder, err := p.recorder(session, r)
	if err != nil {
		return nil, err
	}
	run, err := recorder.Start(ctx, agent.RunOptions{
		RunID: r["run_id"].(string), Resume: true, LeaseWait: 10 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	ran := false
	args, _ := r["args"].(map[string]any)
	value, err := run.Call(ctx, r["tool"].(string), args, func(context.Context) (any, error) {
		ran = true
		return "ran again", nil
	})
	if finished := run.Finish(ctx, err); err == nil {
		err = finished
	}
	if err != nil {
		return nil, err
	}
	return map[string]any{"value": value, "ran": ran}, nil
}

// pay is the exactly-once drill's agent (tests/features/test_exactly_once.py): a run, resumed
// when it has a history, that charges the payment service once under the call's idempotency
// key, this process killed (SIGKILL) at r["kill_at"].
func (p *peer) pay(ctx context.Context, session string, r request) (any, error) {
	recorder, err := p.recorder(session, r)
	if err != nil {
		return nil, err
	}
	run, err := recorder.Start(ctx, agent.RunOptions{RunID: r["run_id"].(string), Resume: true, LeaseWait: 10 * time.Second})
	if err != nil {
		return nil, err
	}
	killAt, _ := r["kill_at"].(string)
	payments, _ := r["payments"].(string)
	args := map[string]any{"amount": r["amount"], "to": session}
	paid, err := run.Call(ctx, "charge", args, func(ctx context.Context) (any, error) {
		return charge(ctx, payments, killAt, args)
	})
	if err == nil && killAt == "after_result" {
		die()
	}
	if finished := run.Finish(ctx, err); err == nil {
		err = finished
	}
	return paid, err
}

// charge is the payment service's protocol (examples/payments.py) spelled out, so that the
// process can die between sending the request and reading its reply.
func charge(ctx context.Context, payments, killAt string, args map[string]any) (any, error) {
	call, ok := agent.CallFrom(ctx)
	if !ok {
		return nil, errors.New("the tool's context carries no call")
	}
	if killAt == "before_request" {
		die()
	}
	where, err := url.Parse(payments)
	if err != nil {
		return nil, err
	}
	conn, err := net.Dial("tcp", where.Host)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	body, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	sent, err := http.NewRequestWithContext(ctx, http.MethodPost, payments+"/charges", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	sent.Header.Set("Content-Type", "application/json")
	sent.Header.Set("Idempotency-Key", call.IdempotencyKey)
	if err := sent.Write(conn); err != nil {
		return nil, err
	}
	if killAt == "after_send" {
		die() // the request is on the wire; its reply is never read
	}
	reply, err := http.ReadResponse(bufio.NewReader(conn), sent)
	if err != nil {
		return nil, err
	}
	defer reply.Body.Close()
	var found map[string]any
	if err := json.NewDecoder(reply.Body).Decode(&found); err != nil {
		return nil, err
	}
	if reply.StatusCode != http.StatusOK && reply.StatusCode != http.StatusCreated {
		return nil, fmt.Errorf("the payment service answered %d: %v", reply.StatusCode, found)
	}
	if killAt == "after_reply" {
		die()
	}
	return found, nil
}

// die is a crash: SIGKILL, no deferred call runs, nothing is flushed.
func die() {
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// openRun starts a run held open across requests (resumed with "resume", waiting for a
// stopped holder's lease), writes its next message, or finishes it.
func (p *peer) openRun(ctx context.Context, session string, r request) (any, error) {
	id, _ := r["run_id"].(string)
	if r["op"] == "run_start" {
		recorder, err := p.recorder(session, r)
		if err != nil {
			return nil, err
		}
		resume, _ := r["resume"].(bool)
		opts := agent.RunOptions{RunID: id, Resume: resume}
		if resume {
			opts.LeaseWait = 10 * time.Second
		}
		run, err := recorder.Start(ctx, opts)
		if err != nil {
			return nil, err
		}
		p.runs[id] = run
		return run.Version(), nil
	}
	run, ok := p.runs[id]
	if !ok {
		return nil, model.Errorf(model.ErrInvalidInput, "run %s is not open here", id)
	}
	if r["op"] == "run_finish" {
		delete(p.runs, id)
		return nil, run.Finish(ctx, nil)
	}
	body, _ := r["body"].(string)
	if _, err := run.Message(ctx, body); err != nil {
		return nil, err
	}
	return run.Version(), nil
}
