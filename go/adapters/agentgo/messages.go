package agentgo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// NativePrefix begins the name of a run's framework stream, agentgo.<run id>: AgentGo's own
// messages, whole, one agentgo.message mutation each, in the order the run committed them.
const NativePrefix = "agentgo."

// NativeKind is the kind of the mutation that holds one AgentGo message in the framework
// stream.
const NativeKind = "agentgo.message"

// AgentMessage is what AgentGo's message committer is given (agentgo.AgentMessage): the
// adapter keeps a message's model representation, which is what AgentGo sends a provider.
type AgentMessage interface {
	ToMessage() (Message, bool)
}

// ToMessage makes a Message an AgentMessage, as agentgo.Message is.
func (m Message) ToMessage() (Message, bool) { return m, true }

// CommitMessage is the run's message committer (agentgo.WithMessageCommitter), which AgentGo
// calls before a message enters the conversation or its tools run; an error stops the run.
//
// The message is appended whole, in AgentGo's JSON, to the run's framework stream (from which
// Messages gives the conversation back), then recorded as the normalized event a timeline
// reads: a user's or the system's message a `message` of the agent `user` (or `system`), the
// assistant's text a `message` of the run's agent following from the model call that gave it,
// each with its place in the conversation as its step; a tool's result is
// already the call's tool_result, and no second event. The framework stream is written first:
// a crash between the two writes loses a line of the timeline, never a message of the
// conversation.
//
// It refuses the message when the run has halted (a call unresolved, an outcome not
// recorded, its lease lost), so that AgentGo stops instead of telling the model the call
// failed. Both writes are made under the run's lease: once the holding is over (the process
// stopped past its TTL, another taking the run over) each is refused with an error of kind
// agent.ErrLeaseLost, nothing written, and the run halts.
func (r *Run) CommitMessage(m AgentMessage) error {
	msg, include := m.ToMessage()
	if !include {
		return nil
	}
	// AgentGo gives the committer no context; the store's own timeout bounds each write.
	ctx := context.Background()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.halted != nil {
		return r.halted
	}
	if r.run.LeaseLost() {
		return r.halt(fmt.Errorf("run %s lost its lease; it may commit nothing more: %w", r.ID(), agent.ErrLeaseLost))
	}
	raw, err := json.Marshal(msg)
	if err != nil {
		return model.Errorf(model.ErrInvalidEvent, "an AgentGo message that is not JSON: %v", err)
	}
	index := r.said
	event := model.Event{"type": model.TypeMutation, "kind": NativeKind, "agent": r.Agent(), "run_id": r.ID(),
		"incarnation": r.run.Incarnation(), "message": contentOf(raw)}
	appendID := fmt.Sprintf("%s:agentgo:%s:%d", r.ID(), r.owner, index+1)
	// Under the run's lease, as the run's own writes are: a process stopped past its lease
	// while another took the run over commits nothing, whatever AgentGo had on its way.
	if _, err := r.run.AppendUnderLease(ctx, r.native, index, appendID, []model.Event{event}); err != nil {
		if errors.Is(err, model.ErrVersionConflict) || errors.Is(err, agent.ErrLeaseLost) {
			return r.halt(err) // another process writes this run's conversation now
		}
		return err
	}
	r.said++
	said := normalized(msg, fmt.Sprintf("%s/message/%d", r.ID(), index))
	if msg.Role == RoleAssistant {
		if said != nil && r.answered != "" {
			said["parents"] = []string{r.answered}
		}
		r.answered = ""
	}
	if said == nil {
		return nil
	}
	_, err = r.run.Say(ctx, said)
	return err
}

// normalized is the event a message is in a timeline, nil for a tool's result (its call's
// tool_result is that already). Its step names the message's place in the framework stream.
func normalized(msg Message, step string) model.Event {
	event := model.Event{"type": model.TypeMessage, "body": msg.TextContent(), "step_id": step}
	switch msg.Role {
	case RoleUser, RoleSystem:
		event["agent"] = string(msg.Role)
	case RoleAssistant:
		if event["body"] == "" {
			return nil // its tool calls are recorded as calls
		}
	default:
		return nil
	}
	return event
}

// Messages is the conversation this execution of the run committed, decoded from its
// framework stream: what a resumed run sets back into AgentGo (HoldRuns, SetMessages,
// Continue) before it goes on.
func (r *Run) Messages(ctx context.Context) ([]Message, error) {
	events, err := r.ledger.log.ReadStream(ctx, r.native, store.ReadStreamOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]Message, 0, len(events))
	for _, event := range events {
		// An earlier execution of the run id had a conversation of its own.
		if event.Fields["kind"] != NativeKind || !sameNumber(event.Fields["incarnation"], r.run.Incarnation()) {
			continue
		}
		raw, err := json.Marshal(event.Fields["message"])
		if err != nil {
			return nil, err
		}
		var msg Message
		if err := json.Unmarshal(raw, &msg); err != nil {
			return nil, model.Errorf(model.ErrInvalidEvent, "%s v%d is not an AgentGo message: %v", r.native, event.Version, err)
		}
		out = append(out, msg)
	}
	return out, nil
}

// sameNumber says whether a recorded number is n, whichever numeric type a store read it as.
func sameNumber(v any, n int64) bool {
	switch x := v.(type) {
	case int64:
		return x == n
	case float64:
		return x == float64(n)
	case int:
		return int64(x) == n
	}
	return false
}
