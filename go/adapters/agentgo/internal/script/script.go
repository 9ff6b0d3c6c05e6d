// Package script is a scripted AgentGo model and the replies it gives, for the adapter's tests
// and the scripted agent the cross-language tests run: a ChatModel of AgentGo's whose reply to
// a conversation is the script's entry for the model replies the conversation holds already.
package script

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"

	ag "github.com/compforge/agentgo"
)

// Model answers from its replies: a conversation holding n model replies gets Replies[n].
type Model struct {
	Replies []ag.Message
	// Before, when set, runs before each answer with the reply's index; its error is the
	// call's (an outage, say), and it may block (a process killed while the provider works).
	Before func(ctx context.Context, index int) error

	calls atomic.Int32
	mu    sync.Mutex
	asked []int
}

// Generate answers the conversation.
func (m *Model) Generate(ctx context.Context, messages []ag.Message, _ []ag.ToolSpec, _ ...ag.CallOption) (*ag.LLMResponse, error) {
	m.calls.Add(1)
	index := 0
	for _, msg := range messages {
		if msg.Role == ag.RoleAssistant {
			index++
		}
	}
	m.mu.Lock()
	m.asked = append(m.asked, index)
	m.mu.Unlock()
	if m.Before != nil {
		if err := m.Before(ctx, index); err != nil {
			return nil, err
		}
	}
	if index >= len(m.Replies) {
		return nil, fmt.Errorf("the script has no reply %d", index)
	}
	return &ag.LLMResponse{Message: m.Replies[index]}, nil
}

// GenerateStream is not scripted: AgentGo's loop here calls Generate.
func (m *Model) GenerateStream(context.Context, []ag.Message, []ag.ToolSpec, ...ag.CallOption) (<-chan ag.StreamEvent, error) {
	return nil, fmt.Errorf("the scripted model does not stream")
}

// SupportsTools says the model calls tools.
func (m *Model) SupportsTools() bool { return true }

// Calls is how many times the model was asked.
func (m *Model) Calls() int { return int(m.calls.Load()) }

// Asked is the index of the reply each call asked for, in order.
func (m *Model) Asked() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int(nil), m.asked...)
}

// Reply is a model's reply: its text, its usage, and the calls it asks for (tool name and JSON
// arguments each), whose ids count within the reply as providers' do (call-1, call-2, ...).
func Reply(text string, usage ag.Usage, calls ...[2]string) ag.Message {
	msg := ag.Message{Role: ag.RoleAssistant, StopReason: ag.StopReasonStop, Usage: &usage}
	if text != "" {
		msg.Content = append(msg.Content, ag.TextBlock(text))
	}
	for i, call := range calls {
		msg.StopReason = ag.StopReasonToolUse
		msg.Content = append(msg.Content, ag.ToolCallBlock(ag.ToolCall{ID: fmt.Sprintf("call-%d", i+1), Name: call[0],
			Args: json.RawMessage(call[1])}))
	}
	return msg
}

// Retryable is an error AgentGo asks the model again after.
type Retryable struct{ Err error }

func (e Retryable) Error() string   { return e.Err.Error() }
func (e Retryable) Unwrap() error   { return e.Err }
func (e Retryable) Retryable() bool { return true }
