package agentgo

import (
	"context"

	ag "github.com/compforge/agentgo"

	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// Restore is the run's restore hook (agentgo.WithBeforeRun), which AgentGo calls before the
// run starts; the snapshot it returns is what the run starts from.
//
// A new run starts from the agent's own snapshot; when that holds a conversation (an earlier
// run's, in this process), the hook records it in the framework stream first (an
// agentgo.baseline mutation), so that the run can be resumed anywhere.
//
// A resumed run (RunOptions.Resume) goes on with Continue. The hook rebuilds the snapshot from
// the ledger: the conversation the run started from and the messages it committed, back to
// the newest boundary AgentGo can continue from, and the progress AgentGo would have saved
// there (the turns completed, a turn due). A turn whose reply was committed but whose tool
// results were not all (AgentGo commits a turn's results after the whole batch, so a crash
// inside a tool leaves them out) is taken back to its start: AgentGo asks for the turn again
// under the same execution id (model-<turn>), the model middleware returns the reply the
// ledger holds, and the tool middleware returns each outcome recorded (an operator's
// `ledger-bus resolve` included), runs again only a call of a tool safe to replay, and stops
// the run at a call still unresolved.
func (r *Run) Restore(ctx context.Context, start ag.BeforeRunContext) (ag.AgentSnapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.halted != nil:
		return ag.AgentSnapshot{}, r.halted
	case r.conversation != nil:
		return ag.AgentSnapshot{}, model.Errorf(model.ErrInvalidInput,
			"run %s records one AgentGo run: start another ledger run (Ledger.Start) for the agent's next one", r.ID())
	case r.resumed && start.Kind != ag.RunKindContinue:
		return ag.AgentSnapshot{}, model.Errorf(model.ErrInvalidInput,
			"run %s is resumed: it goes on with the agent's Continue, not with a %s of its own", r.ID(), start.Kind)
	case !r.resumed:
		return r.begin(ctx, start.Snapshot)
	}
	baseline, recorded, err := r.read(ctx)
	if err != nil {
		return ag.AgentSnapshot{}, err
	}
	kept, progress := boundary(recorded)
	// The run answered before the crash (the answer committed, its end not recorded): AgentGo's
	// Continue has nothing to do and says so (ErrBadContinuation), which Finish takes as the
	// run's good end.
	r.answeredBefore = progress.CompletedTurns > 0 && !progress.NextTurn && len(kept) > 0 && answer(kept[len(kept)-1])
	messages := append(baseline, kept...)
	snapshot := start.Snapshot
	snapshot.State.Messages = ag.ToAgentMessages(messages)
	snapshot.State.TotalUsage = ag.Usage{}
	for _, msg := range messages {
		snapshot.State.TotalUsage.Add(msg.Usage)
	}
	snapshot.State.Progress = progress
	r.conversation = &conversation{baseline: len(baseline), recorded: recorded, at: len(messages)}
	return snapshot, nil
}

// begin records the conversation a new run starts from; the caller holds r.mu.
func (r *Run) begin(ctx context.Context, snapshot ag.AgentSnapshot) (ag.AgentSnapshot, error) {
	var baseline []any
	for _, m := range snapshot.State.Messages {
		if msg, ok := durable(m); ok {
			baseline = append(baseline, jsonValue(msg))
		}
	}
	if len(baseline) > 0 {
		if err := r.appendNative(ctx, BaselineKind, map[string]any{"messages": baseline}); err != nil {
			return ag.AgentSnapshot{}, err
		}
	}
	r.conversation = &conversation{baseline: len(baseline), at: len(baseline)}
	return snapshot, nil
}

// Messages is the run's conversation as the ledger holds it: the conversation it started from,
// then each message it committed.
func (r *Run) Messages(ctx context.Context) ([]ag.Message, error) {
	baseline, recorded, err := r.read(ctx)
	return append(baseline, recorded...), err
}

// read is the run's framework stream, this execution's: the conversation it started from, and
// the messages it committed.
func (r *Run) read(ctx context.Context) (baseline, recorded []ag.Message, err error) {
	events, err := r.ledger.log.ReadStream(ctx, r.native, store.ReadStreamOptions{})
	if err != nil {
		return nil, nil, err
	}
	for _, event := range events {
		// An earlier execution of the run id had a conversation of its own.
		if !sameNumber(event.Fields["incarnation"], r.run.Incarnation()) {
			continue
		}
		switch event.Fields["kind"] {
		case BaselineKind:
			values, _ := event.Fields["messages"].([]any)
			baseline = baseline[:0]
			for _, value := range values {
				msg, err := decode(value)
				if err != nil {
					return nil, nil, model.Errorf(model.ErrInvalidEvent, "%s v%d is not AgentGo's messages: %v", r.native, event.Version, err)
				}
				baseline = append(baseline, msg)
			}
		case NativeKind:
			msg, err := decode(event.Fields["message"])
			if err != nil {
				return nil, nil, model.Errorf(model.ErrInvalidEvent, "%s v%d is not an AgentGo message: %v", r.native, event.Version, err)
			}
			recorded = append(recorded, msg)
		}
	}
	return baseline, recorded, nil
}

// boundary is the newest place in a run's committed messages that AgentGo continues from, and
// the progress its loop would have saved there. A turn is a model reply; its tool results
// follow it, all of them or (a crash inside the batch) not yet: a turn cut short is taken back
// to its start, for AgentGo to ask again under the same execution id.
func boundary(recorded []ag.Message) ([]ag.Message, ag.RunProgress) {
	last, turns := -1, 0
	for i, msg := range recorded {
		if isReply(msg) {
			last, turns = i, turns+1
		}
	}
	progress := ag.RunProgress{Active: true}
	kept := recorded
	switch {
	case last < 0:
		// The prompt committed and no reply yet: the first turn is due.
		progress.NextTurn = len(recorded) > 0
	case len(recorded[last].ToolCalls()) > 0 && !answered(recorded[last], recorded[last+1:]):
		kept = recorded[:last]
		progress.CompletedTurns, progress.NextTurn = turns-1, true
	default:
		// A reply's calls all answered, or its input for the next turn committed, make the
		// next turn due; a final answer ends the run.
		progress.CompletedTurns = turns
		progress.NextTurn = len(recorded[last].ToolCalls()) > 0 || last < len(recorded)-1
	}
	for _, msg := range kept {
		progress.ToolCalls += len(msg.ToolCalls())
		if isError, _ := msg.Metadata["is_error"].(bool); isError && msg.Role == ag.RoleTool {
			progress.ToolErrors++
		}
	}
	return kept, progress
}

// answer says whether a reply ends a run well: it asks for no tool and neither failed nor was
// aborted.
func answer(reply ag.Message) bool {
	failed := reply.StopReason == ag.StopReasonError || reply.StopReason == ag.StopReasonAborted
	return isReply(reply) && len(reply.ToolCalls()) == 0 && !failed
}

// isReply says whether a message is a model's reply, a turn (an abort marker is not).
func isReply(msg ag.Message) bool {
	_, marker := msg.Metadata["abort_phase"]
	return msg.Role == ag.RoleAssistant && !marker
}

// answered says whether every call of reply has its result among after.
func answered(reply ag.Message, after []ag.Message) bool {
	results := map[any]bool{}
	for _, msg := range after {
		if msg.Role == ag.RoleTool {
			results[msg.Metadata["tool_call_id"]] = true
		}
	}
	for _, call := range reply.ToolCalls() {
		if !results[call.ID] {
			return false
		}
	}
	return true
}

// conversation is where a run's conversation stands: the messages it started from, the ones
// the ledger holds of its commits, and the place of the next commit, behind the last recorded
// while a resumed run commits again the turn it was taken back to.
type conversation struct {
	baseline int
	recorded []ag.Message
	at       int
}

func (c *conversation) place() int { return c.at }

// recordedAt is the message the ledger holds at place, if the run committed one there.
func (c *conversation) recordedAt(place int) (ag.Message, bool) {
	i := place - c.baseline
	if i < 0 || i >= len(c.recorded) {
		return ag.Message{}, false
	}
	return c.recorded[i], true
}

// advance passes a message committed again that the ledger holds already.
func (c *conversation) advance() { c.at++ }

// commit adds a message the ledger now holds.
func (c *conversation) commit(msg ag.Message) {
	c.recorded = append(c.recorded, msg)
	c.at++
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
