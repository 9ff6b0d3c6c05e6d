package agentgo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	ag "github.com/compforge/agentgo"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
)

// NativePrefix begins the name of a run's framework stream, agentgo.<run id>: AgentGo's own
// messages, whole, in the order the run committed them, after the conversation the run
// started from.
const NativePrefix = "agentgo."

// The kinds of the framework stream's mutations: one committed message each, and the
// conversation a run started from when it did not start empty.
const (
	NativeKind   = "agentgo.message"
	BaselineKind = "agentgo.baseline"
)

// CommitMessage is the run's message committer (agentgo.WithMessageCommitter), which AgentGo
// calls before a message enters the conversation or its tools run; an error stops the run.
//
// The message is appended whole, in AgentGo's JSON, to the run's framework stream (from which
// the restore hook gives the conversation back), then recorded as the normalized event a
// timeline reads: a user's or the system's message a `message` of the agent `user` (or
// `system`), the assistant's text a `message` of the run's agent following from the model call
// that gave it, each with its place in the conversation as its step; a tool's result is
// already the call's tool_result, and no second event. The framework stream is written first:
// a crash between the two writes loses a line of the timeline, never a message of the
// conversation.
//
// A resumed run commits again the messages of the turn the restore hook took it back to (the
// reply of a turn whose tool results were not all committed, its results): a message the
// framework stream holds at that place already is not written twice; one that differs stops
// the run.
//
// It refuses the message when the run has halted (a call unresolved, an outcome not
// recorded, its lease lost), so that AgentGo stops instead of telling the model the call
// failed. Both writes are made under the run's lease: once the holding is over (the process
// stopped past its TTL, another taking the run over) each is refused with an error of kind
// agent.ErrLeaseLost, nothing written, and the run halts.
func (r *Run) CommitMessage(m ag.AgentMessage) error {
	msg, ok := durable(m)
	if !ok {
		return nil
	}
	// AgentGo gives the committer no context; the store's own timeout bounds each write.
	ctx := context.Background()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.halted != nil {
		return r.halted
	}
	if r.conversation == nil {
		return r.halt(model.Errorf(model.ErrInvalidInput,
			"run %s committed a message before its restore hook ran: give the agent agentgo.WithBeforeRun(run.Restore)", r.ID()))
	}
	if r.run.LeaseLost() {
		return r.halt(fmt.Errorf("run %s lost its lease; it may commit nothing more: %w", r.ID(), agent.ErrLeaseLost))
	}
	place := r.conversation.place()
	if recorded, ok := r.conversation.recordedAt(place); ok {
		if !sameMessage(recorded, msg) {
			return r.halt(model.Errorf(model.ErrInvalidInput, "run %s: message %d (%s) differs from the one the ledger holds "+
				"there (%s): the resumed run no longer follows its record", r.ID(), place, describe(msg), describe(recorded)))
		}
		r.conversation.advance()
		r.replyTo(msg)
		return nil
	}
	if err := r.appendNative(ctx, NativeKind, map[string]any{"message": jsonValue(msg), "place": place}); err != nil {
		return err
	}
	r.conversation.commit(msg)
	said := normalized(msg, fmt.Sprintf("%s/message/%d", r.ID(), place))
	call := r.replyTo(msg)
	if said == nil {
		return nil
	}
	if call != "" {
		said["parents"] = []string{call}
	}
	_, err := r.run.Say(ctx, said)
	return err
}

// replyTo is the model call an assistant's message answers ("" for any other message), which
// the next reply no longer does.
func (r *Run) replyTo(msg ag.Message) string {
	if msg.Role != ag.RoleAssistant {
		return ""
	}
	call := r.answered
	r.answered = ""
	return call
}

// appendNative appends one mutation of kind to the run's framework stream, under the run's
// lease; the caller holds r.mu.
func (r *Run) appendNative(ctx context.Context, kind string, fields map[string]any) error {
	event := model.Event{"type": model.TypeMutation, "kind": kind, "agent": r.Agent(), "run_id": r.ID(),
		"incarnation": r.run.Incarnation()}
	for k, v := range fields {
		event[k] = v
	}
	appendID := fmt.Sprintf("%s:agentgo:%s:%d", r.ID(), r.owner, r.version+1)
	// Under the run's lease, as the run's own writes are: a process stopped past its lease
	// while another took the run over commits nothing, whatever AgentGo had on its way.
	if _, err := r.run.AppendUnderLease(ctx, r.native, r.version, appendID, []model.Event{event}); err != nil {
		if errors.Is(err, model.ErrVersionConflict) || errors.Is(err, agent.ErrLeaseLost) {
			return r.halt(err) // another process writes this run's conversation now
		}
		return err
	}
	r.version++
	return nil
}

// durable is what the ledger keeps of an AgentGo message: a Message whole (a failed or
// aborted reply included, which AgentGo keeps in its transcript), another AgentMessage as the
// Message it sends a model, nothing of one that sends none.
func durable(m ag.AgentMessage) (ag.Message, bool) {
	switch msg := m.(type) {
	case ag.Message:
		return msg, true
	case *ag.Message:
		if msg != nil {
			return *msg, true
		}
		return ag.Message{}, false
	case nil:
		return ag.Message{}, false
	}
	return m.ToMessage()
}

// sameMessage says whether a message committed again is the one recorded at its place: the
// same role, text and calls, or, for a tool's result, the same call's.
func sameMessage(recorded, msg ag.Message) bool {
	if recorded.Role != msg.Role {
		return false
	}
	if msg.Role == ag.RoleTool {
		return recorded.Metadata["tool_call_id"] == msg.Metadata["tool_call_id"]
	}
	if recorded.TextContent() != msg.TextContent() {
		return false
	}
	calls, again := recorded.ToolCalls(), msg.ToolCalls()
	if len(calls) != len(again) {
		return false
	}
	for i := range calls {
		if calls[i].ID != again[i].ID || calls[i].Name != again[i].Name {
			return false
		}
	}
	return true
}

// describe is a message in a few words, for an error: its role, its text's start, its calls.
func describe(msg ag.Message) string {
	text := []rune(msg.TextContent())
	if len(text) > 40 {
		text = append(text[:40], '…')
	}
	out := fmt.Sprintf("%s %q", msg.Role, string(text))
	for _, call := range msg.ToolCalls() {
		out += fmt.Sprintf(" %s(%s)", call.Name, call.ID)
	}
	if id, ok := msg.Metadata["tool_call_id"]; ok {
		out += fmt.Sprintf(" for %v", id)
	}
	return out
}

// normalized is the event a message is in a timeline, nil for a tool's result (its call's
// tool_result is that already). Its step names the message's place in the conversation.
func normalized(msg ag.Message, step string) model.Event {
	event := model.Event{"type": model.TypeMessage, "body": msg.TextContent(), "step_id": step}
	switch msg.Role {
	case ag.RoleUser, ag.RoleSystem:
		event["agent"] = string(msg.Role)
	case ag.RoleAssistant:
		if event["body"] == "" {
			return nil // its tool calls are recorded as calls
		}
	default:
		return nil
	}
	return event
}

// jsonValue is msg as the value an event holds: AgentGo's JSON of it.
func jsonValue(msg any) any {
	raw, err := json.Marshal(msg)
	if err != nil {
		return nil
	}
	return contentOf(raw)
}

// decode reads a message an event holds back into AgentGo's type.
func decode(value any) (ag.Message, error) {
	raw, err := json.Marshal(value)
	if err != nil {
		return ag.Message{}, err
	}
	var msg ag.Message
	err = json.Unmarshal(raw, &msg)
	return msg, err
}
