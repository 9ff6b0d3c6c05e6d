package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/internal/testredis"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
	"github.com/ledger-bus/ledger-bus/go/store/memory"
	"github.com/ledger-bus/ledger-bus/go/store/redisstore"
)

// eachStore runs test on the memory store and on a Redis store of a server of its own.
func eachStore(t *testing.T, test func(t *testing.T, s store.EventStore)) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		test(t, memory.New(store.WithLimits(model.DefaultLimits())))
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		test(t, openRedis(t, testredis.Start(t).URL))
	})
}

func openRedis(t *testing.T, url string) *redisstore.Store {
	t.Helper()
	s, err := redisstore.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// testContext is a context that ends with the test, or after a minute, whichever is first.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func streamID(t *testing.T, session, name string) model.StreamID {
	t.Helper()
	id, err := model.NewStreamID(session, name)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func readStream(t *testing.T, s store.Log, session, name string) []model.RecordedEvent {
	t.Helper()
	events, err := s.ReadStream(testContext(t), streamID(t, session, name), store.ReadStreamOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return events
}

// kinds names each event of a stream: a mutation by its kind, another by its type.
func kinds(t *testing.T, s store.Log, session, name string) []string {
	t.Helper()
	var out []string
	for _, e := range readStream(t, s, session, name) {
		if e.Type() == model.TypeMutation {
			out = append(out, e.Fields["kind"].(string))
		} else {
			out = append(out, e.Type())
		}
	}
	return out
}

func openAttemptIDs(t *testing.T, s store.Attempts, session string) []string {
	t.Helper()
	open, err := s.OpenAttempts(testContext(t), session)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range open {
		ids = append(ids, a.AttemptID)
	}
	return ids
}

func msg(agent, body string) model.Event { return model.Message(agent, body) }

// appendOne appends events to a stream at whatever version it has.
func appendOne(t *testing.T, s store.Log, stream model.StreamID, appendID string, events ...model.Event) model.AppendResult {
	t.Helper()
	result, err := s.Append(testContext(t), stream, model.AnyVersion, appendID, events)
	if err != nil {
		t.Fatal(err)
	}
	return result
}

// resolve closes an open attempt as `ledger-bus resolve` does (ledger_bus/operations/resolve.py):
// a tool_result of agent operator on the call's stream, append_id resolve:<attempt>@<cursor>.
func resolve(t *testing.T, s store.EventStore, session, attemptID, status string, result any) {
	t.Helper()
	open, err := s.OpenAttempts(testContext(t), session)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range open {
		if a.AttemptID != attemptID {
			continue
		}
		event := model.Event{"type": "tool_result", "agent": "operator", "tool": a.Tool,
			"attempt_id": attemptID, "status": status, "result": result}
		if a.RunID != "" {
			event["run_id"] = a.RunID
		}
		appendOne(t, s, streamID(t, session, a.Stream), "resolve:"+attemptID+"@"+a.Cursor, event)
		return
	}
	t.Fatalf("attempt %s is not open", attemptID)
}

// python is the repository's Python, or "" (the test says so and stops) when it is not
// installed (`make install` installs it).
func python(t *testing.T) string {
	t.Helper()
	path, err := filepath.Abs(filepath.Join("..", "..", ".venv", "bin", "python"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Skipf("the repository's Python is not installed (make install): %v", err)
	}
	return path
}

// logOnly is a store with a log and nothing else, as a custom store may be.
type logOnly struct{ store.Log }
