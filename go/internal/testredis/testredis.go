// Package testredis starts redis-server processes for the SDK's tests: a server or a cluster of
// its own on free loopback ports, in a temporary directory, gone when the test ends. A machine
// without redis-server fails the test with how to install it: nothing is skipped in silence.
package testredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server of a test's own.
type Server struct {
	// Addr is "127.0.0.1:PORT"; URL is "redis://127.0.0.1:PORT/0".
	Addr string
	URL  string
	Port int

	t    testing.TB
	dir  string
	args []string
	cmd  *exec.Cmd
}

// Start starts a redis-server on a free loopback port, persisting nothing, stopped when t
// ends. extra are more arguments to redis-server ("--appendonly", "yes", say).
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	port := freePort(t, false)
	s := newServer(t, port, extra)
	s.start()
	return s
}

func newServer(t testing.TB, port int, extra []string) *Server {
	binary, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("the Go SDK's tests need redis-server on the PATH (Debian: apt-get install redis-server): %v", err)
	}
	dir := t.TempDir()
	args := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no",
	}
	args = append(args, extra...)
	s := &Server{
		Addr: fmt.Sprintf("127.0.0.1:%d", port),
		URL:  fmt.Sprintf("redis://127.0.0.1:%d/0", port),
		Port: port, t: t, dir: dir, args: append([]string{binary}, args...),
	}
	t.Cleanup(s.Kill)
	return s
}

func (s *Server) start() {
	s.t.Helper()
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Dir = s.dir
	log, err := os.Create(filepath.Join(s.dir, "redis.log"))
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redis-server did not start: %v", err)
	}
	s.cmd = cmd
	client := s.Client()
	defer client.Close()
	deadline := time.Now().Add(10 * time.Second)
	for client.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			text, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on port %d did not answer within 10s:\n%s", s.Port, text)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Client is a go-redis client of the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	client := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	s.t.Cleanup(func() { _ = client.Close() })
	return client
}

// Kill stops the server at once (SIGKILL), as a crash would; a no-op when it is not running.
func (s *Server) Kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Stop shuts the server down as an operator would (SIGTERM: it saves first if it was told to
// persist) and waits until it has; a no-op when it is not running.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server again on the same port and directory, after Kill or Stop (or
// killing it first when it runs).
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start()
}

// Cluster is a Redis Cluster of a test's own: primaries only, the slots shared evenly.
type Cluster struct {
	// URL is "redis+cluster://127.0.0.1:P1,127.0.0.1:P2,.../0", as every SDK reads it.
	URL   string
	Nodes []*Server
}

// StartCluster starts a cluster of n primaries and waits until every node says the cluster is
// ok.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{}
	var seeds []string
	for range n {
		// A cluster node listens on its port and on port + 10000 (the cluster bus).
		node := newServer(t, freePort(t, true), []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
		})
		node.start()
		c.Nodes = append(c.Nodes, node)
		seeds = append(seeds, node.Addr)
	}
	c.URL = "redis+cluster://" + strings.Join(seeds, ",") + "/0"
	ctx := context.Background()
	clients := make([]*redis.Client, n)
	for i, node := range c.Nodes {
		clients[i] = node.Client()
	}
	const slots = 16384
	share := slots / n
	for i, client := range clients {
		first, last := i*share, i*share+share-1
		if i == n-1 {
			last = slots - 1
		}
		if err := client.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	met := time.Time{}
	for {
		if ok, state := clusterOK(ctx, clients); ok {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the cluster did not reach state ok within 30s: %s", state)
		}
		// A handshake that did not complete is dropped after a while: MEET again, which
		// changes nothing for a node already known.
		if time.Since(met) > 5*time.Second {
			for _, node := range c.Nodes[1:] {
				_ = clients[0].Do(ctx, "CLUSTER", "MEET", "127.0.0.1", node.Port).Err()
			}
			met = time.Now()
		}
		time.Sleep(100 * time.Millisecond)
	}
	return c
}

func clusterOK(ctx context.Context, clients []*redis.Client) (bool, string) {
	for _, client := range clients {
		info, err := client.ClusterInfo(ctx).Result()
		if err != nil {
			return false, err.Error()
		}
		if !strings.Contains(info, "cluster_state:ok") ||
			!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(clients))) {
			return false, strings.ReplaceAll(strings.TrimSpace(info), "\r\n", " ")
		}
	}
	return true, ""
}

// freePort is a loopback port nothing listens on (and, for a cluster node, its bus port too).
func freePort(t testing.TB, withBus bool) int {
	t.Helper()
	for range 1000 {
		listener, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := listener.Addr().(*net.TCPAddr).Port
		_ = listener.Close()
		if !withBus {
			return port
		}
		if port+10000 > 65535 {
			continue
		}
		bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				continue
			}
			t.Fatal(err)
		}
		_ = bus.Close()
		return port
	}
	t.Fatal("no free pair of loopback ports for a cluster node")
	return 0
}
