// Package drill runs the fencing drills of the SDK's tests: a process holding a run with a
// short lease is stopped past it (SIGSTOP) and continued (SIGCONT) with its next write already
// queued on its stdin, while another process may take the run over meanwhile. Whatever it had
// on its way, the stopped process (the zombie) must write nothing, and learn that it lost its
// lease; the run's new holder writes on.
//
// The processes are the test binary itself, started again as a child with an environment
// variable its TestMain hands to Serve: one JSON request a line on stdin, one JSON reply a
// line on stdout, so that one child per role serves every round (a fresh run id each), and a
// drill of many rounds takes seconds, not a process start per round.
package drill

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
)

// childEnv carries a child's Config: set, the process is a drill's child.
const childEnv = "LEDGER_BUS_DRILL_CHILD"

// Config is what a child is started with.
type Config struct {
	URL     string        `json:"url"`
	Session string        `json:"session"`
	Lease   time.Duration `json:"lease"`
}

// Request is one line a drill sends a child.
type Request struct {
	// Op is "start" (the run started, or resumed with Resume), "write" (the run's next write,
	// of Kind, carrying Text) or "end" (the run finished, its lease let go).
	Op     string `json:"op"`
	Run    string `json:"run"`
	Resume bool   `json:"resume,omitempty"`
	// Kind is the write's: "message", or "tool" (a tool call whose arguments carry Text).
	Kind string `json:"kind,omitempty"`
	Text string `json:"text,omitempty"`
}

// Reply is one line a child answers.
type Reply struct {
	OK bool `json:"ok"`
	// Error is the kind of the error that refused the request ("LeaseLost"), Message its text.
	Error   string `json:"error,omitempty"`
	Message string `json:"message,omitempty"`
	// LeaseLost: the request was refused because the run lost its lease (errors.Is
	// agent.ErrLeaseLost, whatever wraps it). Fenced: the store refused it by the write's fence
	// (a *model.LeaseLostError), rather than the process knowing its lease lost first.
	LeaseLost bool `json:"lease_lost,omitempty"`
	Fenced    bool `json:"fenced,omitempty"`
	// Ran: the tool a refused tool call was to run ran all the same.
	Ran bool `json:"ran,omitempty"`
}

// Failed is the reply of a request that err refused.
func Failed(err error) Reply {
	var lost *model.LeaseLostError
	return Reply{Error: agent.Name(err), Message: err.Error(),
		LeaseLost: errors.Is(err, agent.ErrLeaseLost), Fenced: errors.As(err, &lost)}
}

// Child returns the Config this process was started with as a drill's child, and whether it
// is one: a TestMain serves the drill when it is, instead of running the tests.
func Child() (Config, bool) {
	raw, ok := os.LookupEnv(childEnv)
	if !ok {
		return Config{}, false
	}
	var cfg Config
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "drill: a child's config:", err)
		os.Exit(2)
	}
	return cfg, true
}

// Serve answers the requests on stdin with handle, a line each, until stdin closes.
func Serve(handle func(Request) Reply) {
	in := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var req Request
		reply := Reply{Error: "InvalidInput"}
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			reply.Message = err.Error()
		} else {
			reply = handle(req)
		}
		if err := out.Encode(reply); err != nil {
			os.Exit(1)
		}
	}
}

// Process is a child as the drill drives it.
type Process struct {
	t       testing.TB
	name    string
	cmd     *exec.Cmd
	in      io.WriteCloser
	replies chan Reply
	stderr  *lockedBuffer
}

// Spawn starts the test binary again as a child named name (in failures) with cfg; it is
// killed when the test ends.
func Spawn(t testing.TB, name string, cfg Config) *Process {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// -test.run matches nothing: should TestMain not serve, the child runs no test either.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	p := &Process{t: t, name: name, cmd: cmd, replies: make(chan Reply, 1), stderr: &lockedBuffer{}}
	cmd.Stderr = p.stderr
	if p.in, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s did not start: %v", name, err)
	}
	go p.read(out)
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies of SIGKILL all the same, but says nothing
		_ = p.in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() && p.stderr.Len() > 0 {
			t.Logf("%s's stderr:\n%s", name, p.stderr)
		}
	})
	return p
}

// read hands each reply line to Answer, and ends the channel when the child's stdout does.
func (p *Process) read(out io.Reader) {
	defer close(p.replies)
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		var reply Reply
		if err := json.Unmarshal(lines.Bytes(), &reply); err != nil {
			reply = Reply{Error: "drill", Message: fmt.Sprintf("not a reply: %q", lines.Text())}
		}
		p.replies <- reply
	}
}

// Queue sends req without waiting for its reply: a stopped process reads it once continued.
func (p *Process) Queue(req Request) {
	p.t.Helper()
	raw, err := json.Marshal(req)
	if err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.in.Write(append(raw, '\n')); err != nil {
		p.t.Fatalf("%s: %v (it ended: %v)\n%s", p.name, err, p.cmd.Wait(), p.stderr)
	}
}

// Answer is the next reply, waited for up to 30 seconds.
func (p *Process) Answer() Reply {
	p.t.Helper()
	select {
	case reply, ok := <-p.replies:
		if !ok {
			p.t.Fatalf("%s ended: %v\n%s", p.name, p.cmd.Wait(), p.stderr)
		}
		return reply
	case <-time.After(30 * time.Second):
		p.t.Fatalf("%s did not answer within 30s\n%s", p.name, p.stderr)
	}
	return Reply{}
}

// Ask sends req and returns its reply, stopping the test unless it is OK.
func (p *Process) Ask(req Request) Reply {
	p.t.Helper()
	p.Queue(req)
	reply := p.Answer()
	if !reply.OK {
		p.t.Fatalf("%s, %s %s: %s: %s", p.name, req.Op, req.Run, reply.Error, reply.Message)
	}
	return reply
}

// Stop stops the process (SIGSTOP), as a long pause would: it runs nothing, renews nothing.
func (p *Process) Stop() { p.signal(syscall.SIGSTOP) }

// Cont continues a stopped process (SIGCONT).
func (p *Process) Cont() { p.signal(syscall.SIGCONT) }

func (p *Process) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("%s: %v: %v", p.name, sig, err)
	}
}

// lockedBuffer is a child's stderr, written by exec's copying goroutine and read by the test.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Len()
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimRight(b.b.String(), "\n")
}
