package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ledger-bus/ledger-bus/go/internal/testredis"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

func TestURLsAsThePythonPackageReadsThem(t *testing.T) {
	cases := []struct {
		url        string
		scheme     string
		nodes      []string
		durability string
		wait       time.Duration
		addr       string
		db         int
		user, pass string
		master     string
	}{
		{url: "redis://127.0.0.1:6379/0", scheme: "redis", durability: "local", wait: time.Second, addr: "127.0.0.1:6379"},
		{url: "redis://:secret@example.com:7000/3?durability=replicas:2&durability_timeout_ms=250",
			scheme: "redis", durability: "replicas:2", wait: 250 * time.Millisecond, addr: "example.com:7000", db: 3, pass: "secret"},
		{url: "redis+cluster://u:p@a:7000,[::1]:7001,b/0", scheme: "redis+cluster",
			nodes: []string{"a:7000", "[::1]:7001", "b:6379"}, durability: "local", wait: time.Second, user: "u", pass: "p"},
		{url: "rediss+cluster://a:7000?durability=aof", scheme: "rediss+cluster", nodes: []string{"a:7000"},
			durability: "aof", wait: time.Second},
		{url: "redis+sentinel://s1:26379,s2:26380/mymaster/2?sentinel_password=sp", scheme: "redis+sentinel",
			nodes: []string{"s1:26379", "s2:26380"}, durability: "local", wait: time.Second, db: 2, master: "mymaster"},
		{url: "redis+sentinel://u:p@s1:26379/mymaster", scheme: "redis+sentinel",
			nodes: []string{"s1:26379"}, durability: "local", wait: time.Second, master: "mymaster", user: "u", pass: "p"},
	}
	for _, c := range cases {
		got, err := parseURL(c.url)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if got.scheme != c.scheme || strings.Join(got.nodes, " ") != strings.Join(c.nodes, " ") ||
			got.durability.String() != c.durability || got.durability.Timeout != c.wait ||
			got.options.DB != c.db || got.options.Username != c.user || got.options.Password != c.pass ||
			got.master != c.master {
			t.Errorf("%s: %+v %+v", c.url, got, got.options)
		}
		if c.addr != "" && got.options.Addr != c.addr {
			t.Errorf("%s: addr %s", c.url, got.options.Addr)
		}
		if strings.Contains(got.shown, "secret") {
			t.Errorf("%s: shown with its password: %s", c.url, got.shown)
		}
	}
	if got, _ := parseURL("redis+sentinel://s1:1/m/0?sentinel_password=sp"); got.sentinelPassword != "sp" {
		t.Errorf("sentinel password %q", got.sentinelPassword)
	}
	if got, _ := parseURL("rediss+cluster://a:7000,b:7001/0"); got.options.TLSConfig == nil {
		t.Error("rediss+cluster:// without TLS")
	}
}

func TestBadURLsAreInvalidInput(t *testing.T) {
	for _, url := range []string{
		"http://127.0.0.1:6379",
		"no url at all",
		"redis://127.0.0.1:6379/0?durability=twice",
		"redis://127.0.0.1:6379/0?durability=replicas:1&durability_timeout_ms=soon",
		"redis://127.0.0.1:6379/0?no_such_option=1",
		"redis://127.0.0.1:6379/x",
		"redis+cluster://a:7000,,b:7001/0",
		"redis+cluster://a:99999/0",
		"redis+cluster://a:7000/1",
		"redis+sentinel://s1/mymaster",
		"redis+sentinel://s1:26379/",
		"redis+sentinel://s1:26379/m/db/extra",
		"redis://127.0.0.1:6379/0?ssl_ca_certs=/no/such/file",
		"rediss://127.0.0.1:6379/0?ssl_ca_certs=/no/such/file",
	} {
		_, err := Open(context.Background(), url)
		if !errors.Is(err, model.ErrInvalidInput) {
			t.Errorf("%s: %v, want InvalidInput", url, err)
		}
	}
	_, err := Open(context.Background(), "redis://user:hunter2@127.0.0.1:1/0?durability=nope")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("the password shows in %v", err)
	}
	if _, err := New(redis.NewClient(&redis.Options{}), store.WithPrefix("a b")); !errors.Is(err, model.ErrInvalidInput) {
		t.Errorf("a prefix with a space: %v", err)
	}
}

func TestShownURLHidesThePassword(t *testing.T) {
	for given, want := range map[string]string{
		"redis://u:secret@h:1/0":          "redis://u:***@h:1/0",
		"redis+cluster://:s@a:1,b:2/0":    "redis+cluster://:***@a:1,b:2/0",
		"redis://h:1/0":                   "redis://h:1/0",
		"redis://user@h:1/0":              "redis://user@h:1/0",
		"redis+sentinel://u:p@s:1/m?x=1":  "redis+sentinel://u:***@s:1/m?x=1",
		"rediss://default:p%40ss@h:6380/": "rediss://default:***@h:6380/",
	} {
		if got := shownURL(given); got != want {
			t.Errorf("%s: %s, want %s", given, got, want)
		}
	}
}

func TestClusterStore(t *testing.T) {
	ctx := context.Background()
	cluster := testredis.StartCluster(t, 3)
	// A seed that is down first: the client reads the slot map from one that answers.
	down := testredis.Start(t)
	down.Kill()
	s := openOn(t, strings.Replace(cluster.URL, "://", "://"+down.Addr+",", 1))
	// Sessions spread over the nodes; each session's keys on one of them.
	for _, session := range []string{"alpha", "beta", "gamma", "delta", "epsilon"} {
		mustAppend(t, s, streamID(t, session, "s"), 0, "a1", model.Message("a", session))
	}
	found, err := s.Sessions(ctx, store.SessionsOptions{})
	if err != nil || len(found) != 5 {
		t.Fatalf("sessions %+v, %v", found, err)
	}
	holding := 0
	for _, node := range cluster.Nodes {
		if keys := node.Client().Keys(ctx, "lb:{*}:log").Val(); len(keys) > 0 {
			holding++
		}
	}
	if holding < 2 {
		t.Fatalf("five sessions on %d node(s)", holding)
	}
	// An append that waits for a replica asks the session's own primary; there is none to
	// confirm it.
	level, _ := model.ParseDurability("replicas:1", 20*time.Millisecond)
	_, err = s.Append(ctx, streamID(t, "beta", "s"), 1, "a2", []model.Event{model.Message("a", "x")}, store.WithDurability(level))
	var unconfirmed *model.DurabilityNotConfirmedError
	if !errors.As(err, &unconfirmed) || unconfirmed.Result.FirstVersion != 2 {
		t.Fatalf("a cluster append with no replica: %v", err)
	}
}

func TestClusterURLOfASingleServerIsRefused(t *testing.T) {
	server := testredis.Start(t)
	_, err := Open(context.Background(), "redis+cluster://"+server.Addr+"/0", store.WithTimeout(2*time.Second))
	if !errors.Is(err, model.ErrBackendRefused) || !strings.Contains(err.Error(), "not a Redis Cluster node") {
		t.Fatalf("a cluster URL of a single server: %v", err)
	}
}

func TestClusterUnreachable(t *testing.T) {
	server := testredis.Start(t)
	addr := server.Addr
	server.Kill()
	_, err := Open(context.Background(), "redis+cluster://"+addr+"/0", store.WithTimeout(300*time.Millisecond))
	if !errors.Is(err, model.ErrBackendUnavailable) {
		t.Fatalf("a cluster with no node up: %v", err)
	}
}
