package agentgo

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

const (
	defaultMaxTurns   = 100
	defaultMaxRetries = 3
)

// AgentOption configures an Agent.
type AgentOption func(*Agent)

// WithModel sets the model.
func WithModel(model ChatModel) AgentOption { return func(a *Agent) { a.model = model } }

// WithSystemPrompt sets the system prompt.
func WithSystemPrompt(prompt string) AgentOption { return func(a *Agent) { a.systemPrompt = prompt } }

// WithTools sets the tools.
func WithTools(tools ...Tool) AgentOption { return func(a *Agent) { a.tools = tools } }

// WithMaxTurns bounds the model calls of one run (n <= 0: 100).
func WithMaxTurns(n int) AgentOption { return func(a *Agent) { a.maxTurns = n } }

// WithMaxRetries sets how many times a retryable model error is asked again.
func WithMaxRetries(n int) AgentOption { return func(a *Agent) { a.maxRetries = n } }

// WithThinkingLevel sets the thinking level of every model call.
func WithThinkingLevel(level ThinkingLevel) AgentOption {
	return func(a *Agent) { a.thinkingLevel = level }
}

// WithPromptCacheKey sets the prompt-cache routing key of every model call.
func WithPromptCacheKey(key string) AgentOption { return func(a *Agent) { a.promptCacheKey = key } }

// WithToolMiddlewares sets the tool middlewares, the first outermost.
func WithToolMiddlewares(mw ...ToolMiddleware) AgentOption {
	return func(a *Agent) { a.toolMiddlewares = mw }
}

// WithModelMiddlewares sets the model middlewares, the first outermost; each wraps one physical
// provider attempt.
func WithModelMiddlewares(mw ...ModelMiddleware) AgentOption {
	return func(a *Agent) { a.modelMiddlewares = mw }
}

// WithBeforeRun installs the hook called once before each accepted run; the snapshot it returns
// is what the run starts from.
func WithBeforeRun(hook BeforeRunHook) AgentOption { return func(a *Agent) { a.beforeRun = hook } }

// WithAfterRun installs the hook called once after each accepted run.
func WithAfterRun(hook AfterRunHook) AgentOption { return func(a *Agent) { a.afterRun = hook } }

// WithMessageCommitter installs the synchronous durable-message callback: its error stops the
// run before the message enters the conversation or its tools start.
func WithMessageCommitter(fn func(AgentMessage) error) AgentOption {
	return func(a *Agent) { a.messageCommitter = fn }
}

// Agent is the stateful agent: a conversation, its progress, and the loop's runs.
type Agent struct {
	model            ChatModel
	systemPrompt     string
	tools            []Tool
	maxTurns         int
	maxRetries       int
	thinkingLevel    ThinkingLevel
	promptCacheKey   string
	toolMiddlewares  []ToolMiddleware
	modelMiddlewares []ModelMiddleware
	messageCommitter func(AgentMessage) error
	beforeRun        BeforeRunHook
	afterRun         AfterRunHook

	messages    []AgentMessage
	totalUsage  Usage
	runProgress RunProgress
	steeringQ   []AgentMessage
	followUpQ   []AgentMessage
	isRunning   bool
	lastError   string
	cancel      context.CancelFunc
	done        chan struct{}
	held        int

	runMu sync.Mutex // holds the run lifecycle still while a run is prepared or ended
	mu    sync.Mutex
}

// NewAgent makes an agent.
func NewAgent(opts ...AgentOption) *Agent {
	a := &Agent{maxTurns: defaultMaxTurns, maxRetries: defaultMaxRetries}
	for _, opt := range opts {
		opt(a)
	}
	return a
}

// Prompt starts a run with the user's input.
func (a *Agent) Prompt(ctx context.Context, input string) error {
	return a.PromptMessages(ctx, UserMsg(input))
}

// PromptMessages starts a run with messages as its prompt.
func (a *Agent) PromptMessages(ctx context.Context, msgs ...AgentMessage) error {
	a.runMu.Lock()
	defer a.runMu.Unlock()
	if err := a.admit(); err != nil {
		return err
	}
	if err := a.prepareRun(ctx, RunKindPrompt, msgs); err != nil {
		return err
	}
	a.mu.Lock()
	a.startLocked(ctx, RunKindPrompt, msgs)
	return nil
}

// Continue goes on from the conversation without adding to it (after the restore hook gave
// it back, say). A conversation ending in an assistant message goes on only when the progress
// says a turn is due, or with the messages queued; otherwise ErrBadContinuation.
func (a *Agent) Continue(ctx context.Context) error {
	a.runMu.Lock()
	defer a.runMu.Unlock()
	if err := a.admit(); err != nil {
		return err
	}
	if err := a.prepareRun(ctx, RunKindContinue, nil); err != nil {
		return err
	}
	a.mu.Lock()
	if len(a.messages) == 0 {
		a.mu.Unlock()
		return ErrNoMessages
	}
	if a.messages[len(a.messages)-1].GetRole() == RoleAssistant && !a.runProgress.NextTurn {
		queued := dequeue(&a.steeringQ)
		if len(queued) == 0 {
			queued = dequeue(&a.followUpQ)
		}
		if len(queued) == 0 {
			a.mu.Unlock()
			return ErrBadContinuation
		}
		a.startLocked(ctx, RunKindPrompt, queued)
		return nil
	}
	a.startLocked(ctx, RunKindContinue, nil)
	return nil
}

// admit refuses a run while runs are held or one is in flight.
func (a *Agent) admit() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held > 0 {
		return ErrRunsHeld
	}
	if a.isRunning {
		return ErrAlreadyRunning
	}
	return nil
}

// prepareRun runs the BeforeRun hook and installs the snapshot it returns; runMu is held.
func (a *Agent) prepareRun(ctx context.Context, kind RunKind, input []AgentMessage) error {
	a.mu.Lock()
	hook := a.beforeRun
	if hook == nil {
		a.mu.Unlock()
		return nil
	}
	run := BeforeRunContext{Kind: kind, Snapshot: a.snapshotLocked(), Input: copyMessages(input)}
	a.mu.Unlock()
	snapshot, err := callBeforeRun(ctx, hook, run)
	if err != nil {
		return fmt.Errorf("before run: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.held > 0 {
		return ErrRunsHeld
	}
	a.applySnapshotLocked(snapshot)
	return nil
}

func callBeforeRun(ctx context.Context, hook BeforeRunHook, run BeforeRunContext) (snapshot AgentSnapshot, err error) {
	defer func() {
		if recovered := recover(); recovered != nil {
			err = fmt.Errorf("panic: %v", recovered)
		}
	}()
	return hook(ctx, run)
}

// startLocked starts a run; a.mu is held, and released.
func (a *Agent) startLocked(ctx context.Context, kind RunKind, prompts []AgentMessage) {
	a.isRunning = true
	a.lastError = ""
	runCtx, cancel := context.WithCancel(ctx)
	a.cancel = cancel
	a.done = make(chan struct{})
	state := a.stateLocked()
	state.Progress = activateRunProgress(state.Progress, kind == RunKindContinue)
	l := &loop{agent: a, model: a.model, tools: a.tools, maxTurns: a.maxTurns, maxRetries: a.maxRetries,
		commit: a.messageCommitter, modelMiddlewares: a.modelMiddlewares, toolMiddlewares: a.toolMiddlewares,
		systemPrompt: a.systemPrompt, callOptions: a.callOptions(), state: state}
	done := a.done
	a.mu.Unlock()
	go func() {
		summary, err := l.run(runCtx, prompts)
		a.end(runCtx, kind, l.state, summary, err)
		cancel()
		close(done)
	}()
}

func (a *Agent) callOptions() []CallOption {
	var opts []CallOption
	if a.thinkingLevel != "" {
		opts = append(opts, WithThinking(a.thinkingLevel))
	}
	if a.promptCacheKey != "" {
		opts = append(opts, WithCallPromptCacheKey(a.promptCacheKey))
	}
	return opts
}

// end installs a run's final state and calls AfterRun.
func (a *Agent) end(ctx context.Context, kind RunKind, state AgentState, summary RunSummary, err error) {
	a.runMu.Lock()
	defer a.runMu.Unlock()
	a.mu.Lock()
	state.Progress.Active = false
	a.messages = copyMessages(state.Messages)
	a.totalUsage = state.TotalUsage
	a.runProgress = cloneRunProgress(state.Progress)
	a.isRunning = false
	a.cancel = nil
	if err != nil && !errors.Is(err, context.Canceled) {
		a.lastError = err.Error()
	}
	hook := a.afterRun
	snapshot := a.snapshotLocked()
	a.mu.Unlock()
	if hook == nil {
		return
	}
	if hookErr := callAfterRun(context.WithoutCancel(ctx), hook, AfterRunContext{Kind: kind, Snapshot: snapshot,
		Summary: summary, Err: err}); hookErr != nil {
		a.mu.Lock()
		a.lastError = errors.Join(err, fmt.Errorf("after run: %w", hookErr)).Error()
		a.mu.Unlock()
	}
}

func callAfterRun(ctx context.Context, hook AfterRunHook, run AfterRunContext) (err error) {
	defer func() {
		if recovered := recover(); recovered != nil {
			err = fmt.Errorf("panic: %v", recovered)
		}
	}()
	return hook(ctx, run)
}

// Steer queues a message for the next turn.
func (a *Agent) Steer(msg AgentMessage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.steeringQ = append(a.steeringQ, msg)
}

// FollowUp queues a message for when the agent would stop.
func (a *Agent) FollowUp(msg AgentMessage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.followUpQ = append(a.followUpQ, msg)
}

// Abort cancels the run in flight.
func (a *Agent) Abort() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cancel != nil {
		a.cancel()
	}
}

// HoldRuns cancels any run in flight, waits for it to end, and refuses new runs until the
// returned release is called.
func (a *Agent) HoldRuns() (release func()) {
	a.mu.Lock()
	a.held++
	cancel, done := a.cancel, a.done
	a.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if done != nil {
		<-done
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			a.held--
			a.mu.Unlock()
		})
	}
}

// WaitForIdle waits for the run in flight to end.
func (a *Agent) WaitForIdle() {
	a.mu.Lock()
	done := a.done
	a.mu.Unlock()
	if done != nil {
		<-done
	}
}

// State is the agent's state.
func (a *Agent) State() AgentState {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stateLocked()
}

func (a *Agent) stateLocked() AgentState {
	return AgentState{
		SystemPrompt: a.systemPrompt,
		Messages:     copyMessages(a.messages),
		Tools:        a.tools,
		IsRunning:    a.isRunning,
		TotalUsage:   a.totalUsage,
		Progress:     cloneRunProgress(a.runProgress),
		Error:        a.lastError,
	}
}

// Messages is the conversation.
func (a *Agent) Messages() []AgentMessage {
	a.mu.Lock()
	defer a.mu.Unlock()
	return copyMessages(a.messages)
}

// SetMessages replaces the conversation; refused while a run is in flight.
func (a *Agent) SetMessages(msgs []AgentMessage) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.isRunning {
		return fmt.Errorf("cannot set messages: %w", ErrAlreadyRunning)
	}
	a.messages = copyMessages(msgs)
	return nil
}

// SetMessageCommitter replaces the message committer of later runs.
func (a *Agent) SetMessageCommitter(fn func(AgentMessage) error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.messageCommitter = fn
}

// Snapshot is the agent's state and queues, from one critical section.
func (a *Agent) Snapshot() AgentSnapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.snapshotLocked()
}

func (a *Agent) snapshotLocked() AgentSnapshot {
	return AgentSnapshot{State: a.stateLocked(), SteeringQueue: copyMessages(a.steeringQ),
		FollowUpQueue: copyMessages(a.followUpQ)}
}

// SetSnapshot replaces the state and queues of an idle agent.
func (a *Agent) SetSnapshot(snapshot AgentSnapshot) error {
	a.runMu.Lock()
	defer a.runMu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.isRunning {
		return fmt.Errorf("cannot set snapshot: %w", ErrAlreadyRunning)
	}
	a.applySnapshotLocked(snapshot)
	return nil
}

func (a *Agent) applySnapshotLocked(snapshot AgentSnapshot) {
	a.messages = copyMessages(snapshot.State.Messages)
	a.totalUsage = snapshot.State.TotalUsage
	a.runProgress = cloneRunProgress(snapshot.State.Progress)
	a.steeringQ = copyMessages(snapshot.SteeringQueue)
	a.followUpQ = copyMessages(snapshot.FollowUpQueue)
	a.lastError = ""
}

// setMessages is the loop telling the agent what its run committed.
func (a *Agent) setMessages(msgs []AgentMessage) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.messages = copyMessages(msgs)
}

func dequeue(q *[]AgentMessage) []AgentMessage {
	out := *q
	*q = nil
	return out
}

// setProgress is the loop telling the agent a turn completed.
func (a *Agent) setProgress(progress RunProgress) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.runProgress = cloneRunProgress(progress)
}
