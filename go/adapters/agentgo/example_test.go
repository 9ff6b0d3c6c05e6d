package agentgo_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"strings"
	"testing"

	"github.com/compforge/agentgo"

	agentledger "github.com/ledger-bus/ledger-bus/go/adapters/agentgo"
	"github.com/ledger-bus/ledger-bus/go/store/memory"
)

// replies is a model that answers from a script: a call of search, then the answer.
type replies struct{}

func (replies) Generate(_ context.Context, messages []agentgo.Message, _ []agentgo.ToolSpec, _ ...agentgo.CallOption) (*agentgo.LLMResponse, error) {
	reply := agentgo.Message{Role: agentgo.RoleAssistant, StopReason: agentgo.StopReasonToolUse, Content: []agentgo.ContentBlock{
		agentgo.ToolCallBlock(agentgo.ToolCall{ID: "call-1", Name: "search", Args: json.RawMessage(`{"q":"jwt"}`)})}}
	if len(messages) > 1 {
		reply = agentgo.Message{Role: agentgo.RoleAssistant, StopReason: agentgo.StopReasonStop,
			Content: []agentgo.ContentBlock{agentgo.TextBlock("found 2 results")}}
	}
	return &agentgo.LLMResponse{Message: reply}, nil
}

func (replies) GenerateStream(context.Context, []agentgo.Message, []agentgo.ToolSpec, ...agentgo.CallOption) (<-chan agentgo.StreamEvent, error) {
	return nil, fmt.Errorf("not streamed")
}

func (replies) SupportsTools() bool { return true }

// Example is the wiring docs/go.md shows (between its markers), on an in-memory store.
func Example() {
	ctx := context.Background()
	st := memory.New()
	model := replies{}
	tools := []agentgo.Tool{agentgo.NewFuncTool("search", "searches the code", nil,
		func(context.Context, json.RawMessage) (json.RawMessage, error) {
			return json.RawMessage(`["a","b"]`), nil
		})}
	// docs/go.md: begin
	lg, err := agentledger.New(st, "task-42", agentledger.Options{Model: "gpt-5", SafeToReplay: []string{"search"}})
	if err != nil {
		log.Fatal(err)
	}
	run, err := lg.Start(ctx, agentledger.RunOptions{RunID: "r1"}) // after a crash: Resume: true
	if err != nil {
		log.Fatal(err)
	}
	a := agentgo.NewAgent(agentgo.WithModel(model), agentgo.WithTools(tools...),
		agentgo.WithModelMiddlewares(lg.ModelMiddleware()),
		agentgo.WithToolMiddlewares(lg.ToolMiddleware()),
		agentgo.WithMessageCommitter(run.CommitMessage),
		agentgo.WithBeforeRun(run.Restore),
		agentgo.WithAfterRun(run.Ended))
	err = a.Prompt(run.Context(ctx), "find the jwt code") // resumed: a.Continue(run.Context(ctx))
	a.WaitForIdle()
	if err := run.Finish(ctx, err); err != nil {
		log.Fatal(err)
	}
	// docs/go.md: end
	msgs := a.Messages()
	fmt.Println(msgs[len(msgs)-1].TextContent())
	// Output: found 2 results
}

// TestTheDocsShowTheExamplesWiring holds docs/go.md's AgentGo block to Example's, line for line.
func TestTheDocsShowTheExamplesWiring(t *testing.T) {
	source, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := os.ReadFile("../../../docs/go.md")
	if err != nil {
		t.Fatal(err)
	}
	_, region, _ := strings.Cut(string(source), "// docs/go.md: begin\n")
	region, _, _ = strings.Cut(region, "\t// docs/go.md: end")
	var block []string
	for _, line := range strings.Split(strings.TrimSpace(region), "\n") {
		block = append(block, strings.TrimPrefix(line, "\t"))
	}
	if want := strings.Join(block, "\n"); !strings.Contains(string(docs), "```go\n"+want+"\n```") {
		t.Fatalf("docs/go.md does not show the example's wiring as a Go block of its own:\n%s", want)
	}
}
