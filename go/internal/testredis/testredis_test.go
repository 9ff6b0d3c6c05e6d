package testredis

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestServerAnswersAndRestarts(t *testing.T) {
	ctx := context.Background()
	s := Start(t)
	client := s.Client()
	if err := client.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Kill()
	if err := client.Ping(ctx).Err(); err == nil {
		t.Fatal("a killed server answered")
	}
	s.Restart()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("the restarted server does not answer: %v", err)
	}
}

func TestStoppedServerKeepsWhatItPersisted(t *testing.T) {
	ctx := context.Background()
	s := Start(t, "--appendonly", "yes", "--appendfsync", "always")
	client := s.Client()
	if err := client.Set(ctx, "kept", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	s.Stop()
	s.Restart()
	if got := client.Get(ctx, "kept").Val(); got != "v" {
		t.Fatalf("after a restart the key holds %q", got)
	}
}

func TestClusterSpreadsKeysOverItsNodes(t *testing.T) {
	ctx := context.Background()
	c := StartCluster(t, 3)
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr
	}
	client := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer client.Close()
	for _, key := range []string{"a", "b", "c", "d", "e", "f"} {
		if err := client.Set(ctx, key, key, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	holding := 0
	for _, n := range c.Nodes {
		if size := n.Client().DBSize(ctx).Val(); size > 0 {
			holding++
		}
	}
	if holding < 2 {
		t.Fatalf("six keys landed on %d node(s) of 3", holding)
	}
}
