package agentgo

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
)

// ModelMiddleware records each physical model attempt as a call of the tool "model" (as every
// SDK records model calls): its request (the model, the turn, how many messages were sent)
// committed before the provider is called, its result after: the model that answered, the
// tokens (input, output, cache reads), the stop reason, the cost, and the reply itself.
//
// Its step is the execution, the attempt and a digest of the messages sent. On a resumed run,
// an attempt recorded before for the same request returns the recorded reply and the provider
// is not called again; one recorded as failed is asked again. A model call a crash interrupted
// is asked again too: calling a model twice has no effect beyond its cost, so model calls are
// declared safe to replay.
func (l *Ledger) ModelMiddleware() ModelMiddleware {
	return func(ctx context.Context, exec ModelExecution, next ModelExecuteFunc) (ModelResult, error) {
		r, err := runOf(ctx)
		if err != nil {
			return ModelResult{}, err
		}
		return r.callModel(ctx, exec, next)
	}
}

func (r *Run) callModel(ctx context.Context, exec ModelExecution, next ModelExecuteFunc) (ModelResult, error) {
	args := map[string]any{"model": r.ledger.modelName(), "turn": exec.TurnIndex, "execution": exec.ID,
		"messages": len(exec.Request.Messages)}
	step, err := modelStep(r, exec)
	if err != nil {
		return ModelResult{}, err
	}
	r.mu.Lock()
	if halted := r.halted; halted != nil {
		r.mu.Unlock()
		return ModelResult{}, halted
	}
	begun, err := r.run.BeginCall(ctx, agent.ModelTool, args, agent.Step(step), agent.SafeToReplay())
	if errors.Is(err, agent.ErrToolFailed) {
		// Recorded as failed before this start (a provider down then): ask again now, under
		// a step of this start's own, rather than fail the same way on every resume.
		begun, err = r.run.BeginCall(ctx, agent.ModelTool, args, agent.Step(fmt.Sprintf("%s@%d", step, r.started)), agent.SafeToReplay())
	}
	r.mu.Unlock()
	if err != nil {
		return ModelResult{}, err
	}
	if begun.Replayed {
		reply, ok := begun.Value.(map[string]any)
		if !ok {
			return ModelResult{}, model.Errorf(model.ErrInvalidEvent, "the recorded reply of %s is not an object: %v", begun.Attempt.AttemptID, begun.Value)
		}
		result, err := resultOf(agent.ModelReplyOf(reply))
		if err == nil {
			r.answer(begun.Attempt.CallID)
		}
		return result, err
	}

	// The provider is called outside the run's lock: the run's tools may be recording.
	result, callErr := next(ctx, exec)
	status, value := agent.StatusOK, any(nil)
	if callErr != nil {
		status, value = agent.StatusError, agent.Failure(callErr)
	} else {
		reply := replyOf(result)
		if reply.Model == "" {
			reply.Model = r.ledger.modelName()
		}
		value = reply.Result()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.run.EndCall(ctx, begun.Attempt, status, value); err != nil {
		return ModelResult{}, errors.Join(err, callErr)
	}
	if callErr != nil {
		return ModelResult{}, callErr
	}
	r.answered = begun.Attempt.CallID
	return result, nil
}

// modelStep is a model attempt's step: its execution and attempt, and what it was asked (a
// digest of the messages sent), so that a reply recorded for one request is never returned
// for another.
func modelStep(r *Run, exec ModelExecution) (string, error) {
	sent, err := json.Marshal(exec.Request.Messages)
	if err != nil {
		return "", model.Errorf(model.ErrInvalidInput, "a model request that is not JSON: %v", err)
	}
	digest := sha256.Sum256(sent)
	return fmt.Sprintf("%s/model/%s.%d~%x", r.ID(), exec.ID, max(exec.Attempt, 1), digest[:6]), nil
}

// answer notes the model call the next reply committed follows from.
func (r *Run) answer(callID string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answered = callID
}

// modelName is the model a call asks for, as recorded.
func (l *Ledger) modelName() string {
	if l.model == "" {
		return "unknown"
	}
	return l.model
}

// recordedReply is a model call's reply as its tool_result's output holds it: the message in
// AgentGo's own JSON, and whether its tool calls were complete.
type recordedReply struct {
	Message               Message `json:"message"`
	HasCompletedToolCalls bool    `json:"has_completed_tool_calls"`
}

// replyOf is what a model call's tool_result records of its result.
func replyOf(result ModelResult) agent.ModelReply {
	reply := agent.ModelReply{FinishReason: string(result.Message.StopReason)}
	out, err := json.Marshal(recordedReply(result))
	if err == nil {
		reply.Output = contentOf(out)
	}
	if u := result.Message.Usage; u != nil {
		reply.Model = u.Model
		reply.Usage = agent.Usage{InputTokens: int64(u.Input), OutputTokens: int64(u.Output), CachedTokens: int64(u.CacheRead)}
		if u.Cost != nil {
			reply.CostUSD = u.Cost.Total
		}
	}
	return reply
}

// resultOf is a recorded reply as the result AgentGo's loop takes.
func resultOf(reply agent.ModelReply) (ModelResult, error) {
	raw, err := json.Marshal(reply.Output)
	if err != nil {
		return ModelResult{}, err
	}
	var recorded recordedReply
	if err := json.Unmarshal(raw, &recorded); err != nil {
		return ModelResult{}, err
	}
	return ModelResult(recorded), nil
}
