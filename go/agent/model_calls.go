package agent

import (
	"context"
)

// ModelTool is the tool a model call is recorded as: model calls are tool_call/tool_result
// pairs (spec/ledger-v1.md section 2), which the timeline, the trajectory and OpenTelemetry
// exports read their model and token counts from.
const ModelTool = "model"

// Usage is a model call's token counts.
type Usage struct {
	InputTokens  int64
	OutputTokens int64
	// CachedTokens is how many of the input tokens were read from the provider's cache.
	CachedTokens int64
}

// ModelReply is what a model call gave: the reply itself and what it cost.
type ModelReply struct {
	// Model is the model that answered ("": the one asked for).
	Model string
	// Output is the reply, as JSON (text, or the provider's message object).
	Output any
	Usage  Usage
	// FinishReason is why the model stopped ("stop", "tool_calls", ...), "" when not known.
	FinishReason string
	// CostUSD is what the call cost, 0 when not known.
	CostUSD float64
}

// CallModel runs fn as a call of the model model, recorded as Call records a tool's: a
// tool_call of the tool "model" whose args name the model (with args besides, when given),
// committed before fn runs, then its tool_result, whose result holds the model, the token
// usage (input_tokens, output_tokens, total_tokens and input_token_details.cache_read, as the
// Python adapters record a model's usage), the finish reason, the cost and the output. A
// resumed run returns the recorded reply without calling the model again.
func (run *Run) CallModel(ctx context.Context, model string, args map[string]any, fn func(ctx context.Context) (ModelReply, error), opts ...CallOption) (ModelReply, error) {
	asked := make(map[string]any, len(args)+1)
	for name, value := range args {
		asked[name] = value
	}
	asked["model"] = model
	recorded, err := Call(ctx, run, ModelTool, asked, func(ctx context.Context) (map[string]any, error) {
		reply, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		if reply.Model == "" {
			reply.Model = model
		}
		return reply.Result(), nil
	}, opts...)
	if err != nil {
		return ModelReply{}, err
	}
	return ModelReplyOf(recorded), nil
}

// Result is the reply as its tool_result's result: for a loop that records a model call with
// BeginCall and EndCall itself.
func (r ModelReply) Result() map[string]any {
	usage := map[string]any{
		"input_tokens":  r.Usage.InputTokens,
		"output_tokens": r.Usage.OutputTokens,
		"total_tokens":  r.Usage.InputTokens + r.Usage.OutputTokens,
	}
	if r.Usage.CachedTokens > 0 {
		usage["input_token_details"] = map[string]any{"cache_read": r.Usage.CachedTokens}
	}
	out := map[string]any{"model": r.Model, "usage": usage}
	if r.FinishReason != "" {
		out["finish_reason"] = r.FinishReason
	}
	if r.CostUSD > 0 {
		out["cost_usd"] = r.CostUSD
	}
	if r.Output != nil {
		out["output"] = r.Output
	}
	return out
}

// ModelReplyOf reads a model call's recorded result back (a Begun's Value, as a map).
func ModelReplyOf(result map[string]any) ModelReply {
	reply := ModelReply{Output: result["output"]}
	reply.Model, _ = result["model"].(string)
	reply.FinishReason, _ = result["finish_reason"].(string)
	switch cost := result["cost_usd"].(type) {
	case float64:
		reply.CostUSD = cost
	case int64:
		reply.CostUSD = float64(cost)
	}
	if usage, ok := result["usage"].(map[string]any); ok {
		reply.Usage.InputTokens = integer(usage["input_tokens"])
		reply.Usage.OutputTokens = integer(usage["output_tokens"])
		if details, ok := usage["input_token_details"].(map[string]any); ok {
			reply.Usage.CachedTokens = integer(details["cache_read"])
		}
	}
	return reply
}
