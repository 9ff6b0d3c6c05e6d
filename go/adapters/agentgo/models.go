package agentgo

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	ag "github.com/compforge/agentgo"

	"github.com/ledger-bus/ledger-bus/go/agent"
	"github.com/ledger-bus/ledger-bus/go/model"
)

// ModelMiddleware records each physical model attempt as a call of the tool "model" (as every
// SDK records model calls): its request (the model, the turn, AgentGo's execution id, how many
// messages were sent, the tools offered and the call's options) committed before the provider
// is called, its result after: the model that answered, the tokens (input, output, cache
// reads), the stop reason, the cost, and the reply itself.
//
// Its step is AgentGo's execution id (model-<turn>, the turn counted from one within the run,
// as a restored run counts it too), an attempt number and a digest of the messages sent. An
// attempt recorded before for the same request returns the recorded reply and the provider is
// not called again, whichever attempt it was: a resumed run whose first attempt failed and
// whose second answered returns the second's reply. An attempt recorded as failed is asked
// again, as is one a crash interrupted: calling a model twice has no effect beyond its cost,
// so model calls are declared safe to replay.
func (l *Ledger) ModelMiddleware() ag.ModelMiddleware {
	return func(ctx context.Context, exec ag.ModelExecution, next ag.ModelExecuteFunc) (ag.ModelResult, error) {
		r, err := runOf(ctx)
		if err != nil {
			return ag.ModelResult{}, err
		}
		return r.callModel(ctx, exec, next)
	}
}

func (r *Run) callModel(ctx context.Context, exec ag.ModelExecution, next ag.ModelExecuteFunc) (ag.ModelResult, error) {
	args := modelArgs(r.ledger.modelName(), exec)
	step, err := modelStep(r, exec)
	if err != nil {
		return ag.ModelResult{}, err
	}
	r.mu.Lock()
	if halted := r.halted; halted != nil {
		r.mu.Unlock()
		return ag.ModelResult{}, halted
	}
	var begun agent.Begun
	// Attempts recorded as failed are passed over: the first recorded reply is the call's, or
	// the first attempt the ledger has no outcome of is the one asked now. A retry in this
	// process goes on past the attempts it began already: the run's history of the ledger is
	// the one it resumed from.
	attempt := max(exec.Attempt, r.begunModel[step]+1)
	for ; ; attempt++ {
		begun, err = r.run.BeginCall(ctx, agent.ModelTool, args, agent.Step(step.attempt(attempt)), agent.SafeToReplay())
		if !errors.Is(err, agent.ErrToolFailed) {
			break
		}
	}
	if err == nil && !begun.Replayed {
		r.begunModel[step] = attempt
	}
	r.mu.Unlock()
	if err != nil {
		return ag.ModelResult{}, err
	}
	if begun.Replayed {
		reply, ok := begun.Value.(map[string]any)
		if !ok {
			return ag.ModelResult{}, model.Errorf(model.ErrInvalidEvent, "the recorded reply of %s is not an object: %v", begun.Attempt.AttemptID, begun.Value)
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
		return ag.ModelResult{}, errors.Join(err, callErr)
	}
	if callErr != nil {
		return ag.ModelResult{}, callErr
	}
	r.answered = begun.Attempt.CallID
	return result, nil
}

// modelArgs is what a model call's tool_call records of its request.
func modelArgs(name string, exec ag.ModelExecution) map[string]any {
	args := map[string]any{"model": name, "turn": exec.TurnIndex, "execution": exec.ID,
		"messages": len(exec.Request.Messages)}
	if len(exec.Request.Tools) > 0 {
		tools := make([]any, 0, len(exec.Request.Tools))
		for _, spec := range exec.Request.Tools {
			tools = append(tools, spec.Name)
		}
		args["tools"] = tools
	}
	options := map[string]any{}
	cfg := ag.ResolveCallConfig(exec.Options)
	for name, value := range map[string]any{"thinking_level": string(cfg.ThinkingLevel), "thinking_budget": cfg.ThinkingBudget,
		"max_tokens": cfg.MaxTokens, "prompt_cache_key": cfg.PromptCacheKey, "session_id": cfg.SessionID} {
		if value != "" && value != 0 {
			options[name] = value
		}
	}
	if cfg.ToolChoice != nil {
		options["tool_choice"] = jsonValue(cfg.ToolChoice)
	}
	if len(options) > 0 {
		args["options"] = options
	}
	return args
}

// step is a model call's step, less its attempt number: the call and what it asked.
type step struct{ call, request string }

// attempt is the step of one attempt of the call.
func (s step) attempt(n int) string { return fmt.Sprintf("%s.%d%s", s.call, n, s.request) }

// modelStep names a model call's attempts: AgentGo's execution id, which a restored run gives
// the same turn again, and what it was asked (a digest of the messages and tools sent), so
// that a reply recorded for one request is never returned for another. The digest is of the
// request's canonical JSON (RFC 8785) as the ledger gives its messages back, tool call
// arguments' keys sorted and numbers as JSON reads them, and without the messages' times
// (AgentGo stamps the system prompt it prepends anew at each attempt): a resumed run's request,
// made of messages read back from the ledger, has the digest the original had.
func modelStep(r *Run, exec ag.ModelExecution) (step, error) {
	request := exec.Request
	request.Messages = make([]ag.Message, len(exec.Request.Messages))
	for i, msg := range exec.Request.Messages {
		msg.Timestamp = time.Time{}
		request.Messages[i] = msg
	}
	sent, err := model.Canonical(jsonValue(request))
	if err != nil {
		return step{}, model.Errorf(model.ErrInvalidInput, "a model request that is not JSON: %v", err)
	}
	digest := sha256.Sum256(sent)
	return step{call: fmt.Sprintf("%s/model/%s", r.ID(), exec.ID), request: fmt.Sprintf("~%x", digest[:6])}, nil
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
	Message               ag.Message `json:"message"`
	HasCompletedToolCalls bool       `json:"has_completed_tool_calls"`
}

// replyOf is what a model call's tool_result records of its result.
func replyOf(result ag.ModelResult) agent.ModelReply {
	reply := agent.ModelReply{FinishReason: string(result.Message.StopReason),
		Output: jsonValue(recordedReply{Message: result.Message, HasCompletedToolCalls: result.HasCompletedToolCalls})}
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
func resultOf(reply agent.ModelReply) (ag.ModelResult, error) {
	raw, err := json.Marshal(reply.Output)
	if err != nil {
		return ag.ModelResult{}, err
	}
	var recorded recordedReply
	if err := json.Unmarshal(raw, &recorded); err != nil {
		return ag.ModelResult{}, err
	}
	return ag.ModelResult{Message: recorded.Message, HasCompletedToolCalls: recorded.HasCompletedToolCalls}, nil
}
