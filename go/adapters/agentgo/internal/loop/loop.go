// Package loop drives the adapter's hooks in the order AgentGo's agent loop calls them, for
// the adapter's tests and the scripted agent the cross-language tests run: each model attempt
// through the model middlewares, each committed message through the committer before it
// enters the conversation (an error stops the run), each tool call of a committed reply
// through the tool middlewares, a middleware's error made the call's error result, and
// Continue going on from a conversation set back (AgentGo's SetMessages and Continue): a
// reply whose calls have no results yet gets them run, else the model is asked.
//
// It is the part of AgentGo's loop the adapter meets, not AgentGo: no streaming, no context
// management, tools one at a time.
package loop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ledger-bus/ledger-bus/go/adapters/agentgo"
)

// ChatModel answers a conversation (AgentGo's ChatModel, without streaming).
type ChatModel interface {
	Generate(ctx context.Context, messages []agentgo.Message) (agentgo.Message, error)
}

// Tool is a tool the model may call (agentgo.Tool, without its schema).
type Tool interface {
	Name() string
	Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
}

// Agent is an agent loop with AgentGo's hooks.
type Agent struct {
	Model            ChatModel
	Tools            []Tool
	ModelMiddlewares []agentgo.ModelMiddleware
	ToolMiddlewares  []agentgo.ToolMiddleware
	Committer        func(agentgo.AgentMessage) error
	// MaxRetries is how many times a failed model attempt is tried again.
	MaxRetries int
	// MaxTurns bounds the model calls of one Run or Continue (0: 20).
	MaxTurns int

	messages []agentgo.Message
}

// Messages is the conversation so far.
func (a *Agent) Messages() []agentgo.Message { return append([]agentgo.Message(nil), a.messages...) }

// SetMessages sets the conversation back, as AgentGo's SetMessages does on recovery.
func (a *Agent) SetMessages(messages []agentgo.Message) {
	a.messages = append([]agentgo.Message(nil), messages...)
}

// Run adds the user's prompt and runs until the model answers without calling a tool.
func (a *Agent) Run(ctx context.Context, prompt string) error {
	user := agentgo.Message{Role: agentgo.RoleUser, Timestamp: time.Now().UTC(),
		Content: []agentgo.ContentBlock{{Type: agentgo.ContentText, Text: prompt}}}
	if err := a.commit(user); err != nil {
		return err
	}
	return a.Continue(ctx)
}

// Continue goes on from the conversation as it is.
func (a *Agent) Continue(ctx context.Context) error {
	maxTurns := a.MaxTurns
	if maxTurns <= 0 {
		maxTurns = 20
	}
	for turns := 0; ; {
		if last := a.lastReply(); last >= 0 {
			reply := a.messages[last]
			if len(a.pending(last)) > 0 {
				if err := a.runTools(ctx, reply, last); err != nil {
					return err
				}
				continue
			}
			if last == len(a.messages)-1 && len(reply.ToolCalls()) == 0 {
				return nil
			}
		}
		if turns == maxTurns {
			return fmt.Errorf("stopped after %d turns", maxTurns)
		}
		turns++
		reply, err := a.ask(ctx)
		if err != nil {
			return err
		}
		if err := a.commit(reply); err != nil {
			return err
		}
	}
}

// turn is the index of the next model call: the replies so far.
func (a *Agent) turn() int {
	n := 0
	for _, m := range a.messages {
		if m.Role == agentgo.RoleAssistant {
			n++
		}
	}
	return n
}

// ask calls the model through the model middlewares, retrying a failed attempt.
func (a *Agent) ask(ctx context.Context) (agentgo.Message, error) {
	turn := a.turn()
	exec := agentgo.ModelExecution{
		Execution: agentgo.Execution{ID: fmt.Sprintf("turn-%d", turn), Kind: agentgo.ExecutionKindModel, TurnIndex: turn},
		Request:   agentgo.LLMRequest{Messages: a.Messages()},
	}
	call := func(ctx context.Context, exec agentgo.ModelExecution) (agentgo.ModelResult, error) {
		msg, err := a.Model.Generate(ctx, exec.Request.Messages)
		if err != nil {
			return agentgo.ModelResult{}, err
		}
		return agentgo.ModelResult{Message: msg, HasCompletedToolCalls: len(msg.ToolCalls()) > 0}, nil
	}
	for i := len(a.ModelMiddlewares) - 1; i >= 0; i-- {
		middleware, next := a.ModelMiddlewares[i], call
		call = func(ctx context.Context, exec agentgo.ModelExecution) (agentgo.ModelResult, error) {
			return middleware(ctx, exec, next)
		}
	}
	var errs []error
	for attempt := 1; attempt <= a.MaxRetries+1; attempt++ {
		exec.Attempt = attempt
		result, err := call(ctx, exec)
		if err == nil {
			return result.Message, nil
		}
		errs = append(errs, err)
	}
	return agentgo.Message{}, errors.Join(errs...)
}

// lastReply is the index of the newest assistant message, -1 when there is none.
func (a *Agent) lastReply() int {
	for i := len(a.messages) - 1; i >= 0; i-- {
		if a.messages[i].Role == agentgo.RoleAssistant {
			return i
		}
	}
	return -1
}

// pending is the calls of the reply at index that have no results yet.
func (a *Agent) pending(index int) []agentgo.ToolCall {
	answered := map[string]bool{}
	for _, m := range a.messages[index+1:] {
		if id, ok := m.Metadata["tool_call_id"].(string); ok {
			answered[id] = true
		}
	}
	var out []agentgo.ToolCall
	for _, call := range a.messages[index].ToolCalls() {
		if !answered[call.ID] {
			out = append(out, call)
		}
	}
	return out
}

// runTools runs the calls of the reply at index that have no results yet, one at a time.
func (a *Agent) runTools(ctx context.Context, reply agentgo.Message, index int) error {
	for _, call := range a.pending(index) {
		exec := agentgo.ToolExecution{Call: call, Execution: agentgo.Execution{ID: call.ID, Kind: agentgo.ExecutionKindTool,
			ParentID: fmt.Sprintf("turn-%d", a.turnOf(index)), TurnIndex: a.turnOf(index), Attempt: 1}}
		result, err := a.tool(ctx, exec)
		if err != nil { // AgentGo makes a middleware's error the call's result
			text, _ := json.Marshal(err.Error())
			result = agentgo.ToolResult{ToolCallID: call.ID, ToolName: call.Name, Content: text, IsError: true}
		}
		msg := agentgo.Message{Role: agentgo.RoleTool, Timestamp: time.Now().UTC(),
			Content:  []agentgo.ContentBlock{{Type: agentgo.ContentText, Text: string(result.Content)}},
			Metadata: map[string]any{"tool_call_id": call.ID, "tool_name": call.Name, "is_error": result.IsError}}
		if err := a.commit(msg); err != nil {
			return err
		}
	}
	return nil
}

// turnOf is the turn of the reply at index.
func (a *Agent) turnOf(index int) int {
	n := 0
	for _, m := range a.messages[:index] {
		if m.Role == agentgo.RoleAssistant {
			n++
		}
	}
	return n
}

// tool runs one call through the tool middlewares.
func (a *Agent) tool(ctx context.Context, exec agentgo.ToolExecution) (agentgo.ToolResult, error) {
	call := func(ctx context.Context, exec agentgo.ToolExecution) (agentgo.ToolResult, error) {
		for _, tool := range a.Tools {
			if tool.Name() == exec.Call.Name {
				content, err := tool.Execute(ctx, exec.Call.Args)
				if err != nil {
					return agentgo.ToolResult{}, err
				}
				return agentgo.ToolResult{ToolCallID: exec.Call.ID, ToolName: exec.Call.Name, Content: content}, nil
			}
		}
		return agentgo.ToolResult{}, fmt.Errorf("no tool %q", exec.Call.Name)
	}
	for i := len(a.ToolMiddlewares) - 1; i >= 0; i-- {
		middleware, next := a.ToolMiddlewares[i], call
		call = func(ctx context.Context, exec agentgo.ToolExecution) (agentgo.ToolResult, error) {
			return middleware(ctx, exec, next)
		}
	}
	return call(ctx, exec)
}

// commit passes a message to the committer, then into the conversation.
func (a *Agent) commit(m agentgo.Message) error {
	if a.Committer != nil {
		if err := a.Committer(m); err != nil {
			return err
		}
	}
	a.messages = append(a.messages, m)
	return nil
}

// Scripted is a ChatModel that answers the n-th turn (the replies in the conversation so far)
// with Replies[n], and counts its calls; Fail makes the first attempt at a turn fail, Down
// every attempt.
type Scripted struct {
	Replies []agentgo.Message
	Fail    map[int]bool
	Down    bool
	Calls   int

	failed map[int]bool
}

// Generate answers the conversation's next turn.
func (s *Scripted) Generate(_ context.Context, messages []agentgo.Message) (agentgo.Message, error) {
	s.Calls++
	turn := 0
	for _, m := range messages {
		if m.Role == agentgo.RoleAssistant {
			turn++
		}
	}
	if s.Down {
		return agentgo.Message{}, errors.New("provider unavailable")
	}
	if s.Fail[turn] && !s.failed[turn] {
		if s.failed == nil {
			s.failed = map[int]bool{}
		}
		s.failed[turn] = true
		return agentgo.Message{}, fmt.Errorf("provider unavailable (turn %d)", turn)
	}
	if turn >= len(s.Replies) {
		return agentgo.Message{}, fmt.Errorf("no reply scripted for turn %d", turn)
	}
	reply := s.Replies[turn]
	reply.Timestamp = time.Now().UTC()
	return reply, nil
}

// Func is a tool made of a function.
type Func struct {
	ToolName string
	Fn       func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
}

// Name is the tool's name.
func (f Func) Name() string { return f.ToolName }

// Execute runs the tool.
func (f Func) Execute(ctx context.Context, args json.RawMessage) (json.RawMessage, error) {
	return f.Fn(ctx, args)
}

// Reply is an assistant reply: its text, its tool calls (name and JSON arguments, ids
// call-1, call-2, ... in order, prefixed by idPrefix) and its token usage.
func Reply(text string, usage agentgo.Usage, idPrefix string, calls ...[2]string) agentgo.Message {
	m := agentgo.Message{Role: agentgo.RoleAssistant, Usage: &usage, StopReason: "stop"}
	if text != "" {
		m.Content = append(m.Content, agentgo.ContentBlock{Type: agentgo.ContentText, Text: text})
	}
	for i, call := range calls {
		m.StopReason = "toolUse"
		m.Content = append(m.Content, agentgo.ContentBlock{Type: agentgo.ContentToolCall, ToolCall: &agentgo.ToolCall{
			ID: fmt.Sprintf("%scall-%d", idPrefix, i+1), Name: call[0], Args: json.RawMessage(call[1])}})
	}
	return m
}
