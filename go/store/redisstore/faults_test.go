package redisstore

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ledger-bus/ledger-bus/go/internal/lua"
	"github.com/ledger-bus/ledger-bus/go/internal/testredis"
	"github.com/ledger-bus/ledger-bus/go/model"
	"github.com/ledger-bus/ledger-bus/go/store"
)

// dropProxy relays connections to a Redis server, and when armed cuts the connection that
// sends a request holding its marker once the server has answered it: the request ran, its
// reply is lost, as when a connection breaks at the worst moment.
type dropProxy struct {
	listener net.Listener
	target   string
	marker   []byte
	armed    atomic.Bool
	dropped  atomic.Int32
	wg       sync.WaitGroup
}

func startProxy(t *testing.T, target, marker string) *dropProxy {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{listener: listener, target: target, marker: []byte(marker)}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		_ = listener.Close()
		p.wg.Wait()
	})
	return p
}

func (p *dropProxy) addr() string { return p.listener.Addr().String() }

func (p *dropProxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		var swallow atomic.Bool
		closeBoth := func() {
			_ = client.Close()
			_ = server.Close()
		}
		p.wg.Add(2)
		go func() { // client to server
			defer p.wg.Done()
			defer closeBoth()
			buf := make([]byte, 64*1024)
			for {
				n, err := client.Read(buf)
				if n > 0 {
					if bytes.Contains(bytes.ToLower(buf[:n]), p.marker) && p.armed.CompareAndSwap(true, false) {
						swallow.Store(true)
					}
					if _, err := server.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // server to client, unless the reply is to be lost
			defer p.wg.Done()
			defer closeBoth()
			buf := make([]byte, 64*1024)
			for {
				n, err := server.Read(buf)
				if n > 0 && swallow.Load() {
					p.dropped.Add(1)
					return
				}
				if n > 0 {
					if _, err := client.Write(buf[:n]); err != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

func TestLostReplyIsRetriedAndLandsOnce(t *testing.T) {
	ctx := context.Background()
	server := testredis.Start(t)
	rdb := server.Client()
	// Loaded beforehand, so that the call whose reply is lost is the one that runs the script.
	if err := lua.Append.Load(ctx, rdb).Err(); err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, server.Addr, "evalsha")
	s := openOn(t, "redis://"+proxy.addr()+"/0")
	stream := streamID(t, "lost", "s")
	mustAppend(t, s, stream, 0, "a0", model.Message("a", "before"))

	proxy.armed.Store(true)
	result, err := s.Append(ctx, stream, 1, "a1", []model.Event{model.Message("a", "one"), model.Message("a", "two")})
	if err != nil {
		t.Fatalf("append whose reply was lost: %v", err)
	}
	if proxy.dropped.Load() != 1 {
		t.Fatalf("the proxy dropped %d replies", proxy.dropped.Load())
	}
	// The first call wrote the events; the retry found them under its append_id.
	if !result.Deduplicated || result.FirstVersion != 2 || result.LastVersion != 3 {
		t.Fatalf("result %+v", result)
	}
	if n := rdb.XLen(ctx, "lb:{lost}:log").Val(); n != 3 {
		t.Fatalf("the log holds %d events, want 3", n)
	}
}

func TestUnavailableServer(t *testing.T) {
	ctx := context.Background()
	server := testredis.Start(t)
	s := openOn(t, server.URL, store.WithTimeout(300*time.Millisecond))
	stream := streamID(t, "down", "s")
	mustAppend(t, s, stream, 0, "a0", model.Message("a", "up"))
	server.Kill()

	_, err := s.Append(ctx, stream, 1, "a1", []model.Event{model.Message("a", "down")})
	if !errors.Is(err, model.ErrBackendUnavailable) || model.ExitCode(err) != 5 {
		t.Fatalf("append to a server that is down: %v", err)
	}
	if _, err := s.ScanSession(ctx, "down", store.ScanOptions{}); !errors.Is(err, model.ErrBackendUnavailable) {
		t.Fatalf("read from a server that is down: %v", err)
	}
	// A canceled context ends the retries with its own error.
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.StreamVersion(canceled, stream); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
}

func TestCallsRideOutARestart(t *testing.T) {
	ctx := context.Background()
	server := testredis.Start(t)
	s := openOn(t, server.URL, store.WithTimeout(20*time.Second))
	stream := streamID(t, "restart", "s")
	mustAppend(t, s, stream, 0, "a0", model.Message("a", "up"))
	server.Kill()
	restarted := make(chan struct{})
	go func() {
		defer close(restarted)
		time.Sleep(300 * time.Millisecond)
		server.Restart() // empty: nothing was persisted
	}()
	// The restarted server lost the stream (it persisted nothing): an append to it is
	// refused as rewound, an append elsewhere lands.
	_, err := s.Append(ctx, stream, model.AnyVersion, "a1", []model.Event{model.Message("a", "back")})
	<-restarted
	if !errors.Is(err, model.ErrHistoryRewound) {
		t.Fatalf("append across a restart that lost the stream: %v", err)
	}
	result, err := s.Append(ctx, streamID(t, "restart", "other"), 0, "b1", []model.Event{model.Message("a", "back")})
	if err != nil || result.FirstVersion != 1 {
		t.Fatalf("append after the restart: %+v %v", result, err)
	}
}

func TestClosedStore(t *testing.T) {
	s, _, _ := startStore(t)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("closed twice: %v", err)
	}
	if _, err := s.SessionExists(context.Background(), "x"); !errors.Is(err, model.ErrBackendUnavailable) {
		t.Fatalf("a call on a closed store: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	ctx := context.Background()
	server := testredis.Start(t)
	admin := server.Client()
	users := []string{
		// Everything but XADD: the script's own check refuses before it writes anything.
		"ACL SETUSER noxadd on >pw ~* &* +@all -xadd",
		// Keys of another prefix only: the server refuses the script's call.
		"ACL SETUSER elsewhere on >pw ~other:* &* +@all",
	}
	for _, command := range users {
		args := []any{}
		for _, word := range strings.Fields(command) {
			args = append(args, word)
		}
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	stream := streamID(t, "acl", "s")
	events := []model.Event{model.Message("a", "x")}

	noxadd := openOn(t, "redis://noxadd:pw@"+server.Addr+"/0", store.WithTimeout(time.Second))
	_, err := noxadd.Append(ctx, stream, 0, "a1", events)
	if !errors.Is(err, model.ErrBackendRefused) || !strings.Contains(err.Error(), "XADD lb:{acl}:log") ||
		model.ExitCode(err) != 8 {
		t.Fatalf("a user without XADD: %v", err)
	}
	if keys := admin.Keys(ctx, "lb:{acl}:*").Val(); len(keys) != 0 {
		t.Fatalf("a refused append wrote %v", keys)
	}

	elsewhere := openOn(t, "redis://elsewhere:pw@"+server.Addr+"/0", store.WithTimeout(time.Second))
	_, err = elsewhere.Append(ctx, stream, 0, "a1", events)
	if !errors.Is(err, model.ErrBackendRefused) || !strings.Contains(err.Error(), "ACL") {
		t.Fatalf("a user without the keys: %v", err)
	}
	if _, err := elsewhere.ScanSession(ctx, "acl", store.ScanOptions{}); !errors.Is(err, model.ErrBackendRefused) ||
		!strings.Contains(err.Error(), "XRANGE lb:{acl}:log") {
		t.Fatalf("a read without the keys: %v", err)
	}

	wrong := openOn(t, "redis://noxadd:nope@"+server.Addr+"/0", store.WithTimeout(time.Second))
	if _, err := wrong.SessionExists(ctx, "acl"); !errors.Is(err, model.ErrBackendRefused) ||
		!strings.Contains(err.Error(), "credentials") {
		t.Fatalf("wrong password: %v", err)
	}
}

func TestMemoryFullIsRefused(t *testing.T) {
	ctx := context.Background()
	s, _, rdb := startStore(t, store.WithTimeout(time.Second))
	stream := streamID(t, "full", "s")
	mustAppend(t, s, stream, 0, "a0", model.Message("a", "room"))
	if err := rdb.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	_, err := s.Append(ctx, stream, 1, "a1", []model.Event{model.Message("a", "no room")})
	if !errors.Is(err, model.ErrBackendRefused) || !strings.Contains(err.Error(), "memory") {
		t.Fatalf("append with memory full: %v", err)
	}
	rdb.ConfigSet(ctx, "maxmemory", "0")
	if v, _ := s.StreamVersion(ctx, stream); v != 1 {
		t.Fatalf("version %d", v)
	}
}

func TestDurabilityNotConfirmedWithoutAReplica(t *testing.T) {
	ctx := context.Background()
	level, err := model.ParseDurability("replicas:1", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	s, _, rdb := startStore(t, store.WithDefaultDurability(level))
	stream := streamID(t, "alone", "s")
	_, err = s.Append(ctx, stream, 0, "a1", []model.Event{model.Message("a", "x")})
	var unconfirmed *model.DurabilityNotConfirmedError
	if !errors.As(err, &unconfirmed) || !errors.Is(err, model.ErrDurabilityNotConfirmed) || model.ExitCode(err) != 7 {
		t.Fatalf("append with no replica: %v", err)
	}
	r := unconfirmed.Result
	if r.FirstVersion != 1 || r.LastVersion != 1 || r.Deduplicated || r.Durability != "replicas:1" || r.Replicas != 0 {
		t.Fatalf("the result carried: %+v", r)
	}
	if n := rdb.XLen(ctx, "lb:{alone}:log").Val(); n != 1 {
		t.Fatalf("written on the primary: %d events", n)
	}
	// Retried with the same append_id: the original, waited for again.
	_, err = s.Append(ctx, stream, 0, "a1", []model.Event{model.Message("a", "x")})
	if !errors.As(err, &unconfirmed) || !unconfirmed.Result.Deduplicated || unconfirmed.Result.Cursor != r.Cursor {
		t.Fatalf("retry: %v", err)
	}
	// One append may ask for less than the store.
	local, err := s.Append(ctx, stream, 1, "a2", []model.Event{model.Message("a", "y")}, store.WithDurability(model.Local()))
	if err != nil || local.Durability != "local" {
		t.Fatalf("a local append: %+v %v", local, err)
	}
}

func TestDurabilityConfirmedByAReplica(t *testing.T) {
	ctx := context.Background()
	// No delay before the replica's first sync (5 s by default, for more replicas to join).
	primary := testredis.Start(t, "--appendonly", "yes", "--appendfsync", "always", "--repl-diskless-sync-delay", "0")
	replica := testredis.Start(t, "--replicaof", "127.0.0.1", itoa(primary.Port))
	admin := primary.Client()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(admin.Info(ctx, "replication").Val(), "connected_slaves:1") ||
		!strings.Contains(replica.Client().Info(ctx, "replication").Val(), "master_link_status:up") {
		if time.Now().After(deadline) {
			t.Fatal("the replica did not connect within 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	level, err := model.ParseDurability("replicas:1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := openOn(t, primary.URL+"?durability=replicas:1&durability_timeout_ms=5000")
	if s.Durability() != level {
		t.Fatalf("the URL's durability: %+v", s.Durability())
	}
	stream := streamID(t, "safe", "s")
	result := mustAppend(t, s, stream, 0, "a1", model.Message("a", "kept"))
	if result.Durability != "replicas:1" || result.Replicas != 1 || result.AOF {
		t.Fatalf("result %+v", result)
	}
	if n := replica.Client().XLen(ctx, "lb:{safe}:log").Val(); n != 1 {
		t.Fatalf("the replica holds %d events", n)
	}

	// The AOF asked for too: WAITAOF where the server has it (Redis 7.2), refused where not.
	aof, err := model.ParseDurability("aof+replicas:1", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := admin.Do(ctx, "COMMAND", "INFO", "WAITAOF").Slice()
	hasWaitAOF := len(info) == 1 && info[0] != nil
	result, err = s.Append(ctx, stream, 1, "a2", []model.Event{model.Message("a", "fsynced")}, store.WithDurability(aof))
	switch {
	case hasWaitAOF && (err != nil || !result.AOF || result.Replicas != 1 || result.Durability != "aof+replicas:1"):
		t.Fatalf("aof+replicas:1 on a server with WAITAOF: %+v %v", result, err)
	case !hasWaitAOF && (!errors.Is(err, model.ErrBackendRefused) || !strings.Contains(err.Error(), "WAITAOF")):
		t.Fatalf("aof+replicas:1 on a server without WAITAOF: %v", err)
	case !hasWaitAOF:
		if v, _ := s.StreamVersion(ctx, stream); v != 1 {
			t.Fatalf("a refused append wrote: version %d", v)
		}
	}
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}
