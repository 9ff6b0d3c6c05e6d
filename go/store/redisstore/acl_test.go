package redisstore

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/internal/testredis"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// TestScriptsRunAgainUnderTheWriterRole runs every script the store runs under the writer role
// the repository ships (deploy/users.acl, made by `ledger-bus acl`), each after the server lost
// its scripts (a restart, SCRIPT FLUSH): they are loaded again by SCRIPT LOAD and run by
// EVALSHA, never by EVAL, which the roles do not grant.
func TestScriptsRunAgainUnderTheWriterRole(t *testing.T) {
	data, err := os.ReadFile("../../../deploy/users.acl")
	if err != nil {
		t.Fatal(err)
	}
	var rules []any
	for _, line := range strings.Split(string(data), "\n") {
		if words := strings.Fields(line); len(words) > 2 && words[1] == "ledger-writer" {
			for _, rule := range words[2:] {
				if rule == "off" {
					rule = "on"
				}
				rules = append(rules, rule)
			}
		}
	}
	if len(rules) == 0 {
		t.Fatal("no ledger-writer in deploy/users.acl")
	}
	server := testredis.Start(t)
	admin := server.Client()
	ctx := context.Background()
	setUser := append([]any{"ACL", "SETUSER", "ledger-writer", ">secret"}, rules...)
	if err := admin.Do(ctx, setUser...).Err(); err != nil {
		t.Fatal(err)
	}
	url := strings.Replace(server.URL, "redis://", "redis://ledger-writer:secret@", 1)
	s := openOn(t, url, store.WithTimeout(3*time.Second))
	flush := func() {
		t.Helper()
		if err := admin.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	stream, _ := model.NewStreamID("acl-1", "main")
	flush()
	if token, err := s.Lease(ctx, store.Acquire, "acl-1", "run-r1", "me", 10*time.Second); err != nil || token < 1 {
		t.Fatalf("lease: %d, %v", token, err)
	}
	flush()
	if done, err := s.Append(ctx, stream, 0, "a1", []model.Event{model.Message("me", "one")}); err != nil || done.FirstVersion != 1 {
		t.Fatalf("append: %+v, %v", done, err)
	}
	flush()
	if events, err := s.ReadStream(ctx, stream, store.ReadStreamOptions{}); err != nil || len(events) != 1 {
		t.Fatalf("read: %v, %v", events, err)
	}
	flush()
	if _, err := s.GroupCreate(ctx, "acl-1", "g", ""); err != nil {
		t.Fatalf("group: %v", err)
	}
	flush()
	if _, err := s.GroupPrune(ctx, "acl-1", "g", time.Hour); err != nil {
		t.Fatalf("prune: %v", err)
	}
}
