// Package lua holds the ledger's Lua scripts, the protocol every language's Redis store speaks:
// copies of ledger_bus/store/lua/*.lua made by `go generate` (gen/), byte for byte, embedded in
// the binary, each ready to run as a go-redis Script (EVALSHA, loaded by EVAL when the server
// has not got it). A test holds every copy identical to its original.
package lua

//go:generate go run ./gen

import (
	"context"
	"embed"
	"io/fs"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/*.lua scripts/protocol.json
var files embed.FS

// Protocol is the scripts' calling convention, ledger_bus/store/lua/protocol.json: each
// script's KEYS, ARGV and reply kinds, which the store's key builders and reply parsers are
// held to by their tests.
func Protocol() []byte {
	data, _ := files.ReadFile("scripts/protocol.json") // embedded: it cannot fail
	return data
}

// The scripts the SDK runs, by the name of their file.
var (
	Append         = mustScript("append")
	ArchiveAbandon = mustScript("archive_abandon")
	ArchiveFinish  = mustScript("archive_finish")
	ArtifactPut    = mustScript("artifact_put")
	DeleteSession  = mustScript("delete_session")
	DeleteStream   = mustScript("delete_stream")
	ForgetSession  = mustScript("forget_session")
	Lease          = mustScript("lease")
	PruneConsumers = mustScript("prune_consumers")
	ReadStream     = mustScript("read_stream")
	Restore        = mustScript("restore")
)

// Script is one of the ledger's scripts: its name ("append"), its source, and the go-redis
// Script that runs it.
type Script struct {
	Name   string
	Source string
	*redis.Script
}

// Run runs the script by EVALSHA. Where the server has not got it (a restart, a failover to a
// node that never ran it, SCRIPT FLUSH), nothing of it ran: SCRIPT LOAD loads it (on every
// primary of a cluster) and EVALSHA runs it again. Never EVAL, as go-redis's own Run falls
// back to: the roles `ledger-bus acl` writes grant EVALSHA, EVALSHA_RO and SCRIPT LOAD, not
// EVAL.
func (s *Script) Run(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.loaded(ctx, c, func() *redis.Cmd { return s.EvalSha(ctx, c, keys, args...) })
}

// RunRO is Run by EVALSHA_RO, for a script that only reads.
func (s *Script) RunRO(ctx context.Context, c redis.Scripter, keys []string, args ...any) *redis.Cmd {
	return s.loaded(ctx, c, func() *redis.Cmd { return s.EvalShaRO(ctx, c, keys, args...) })
}

func (s *Script) loaded(ctx context.Context, c redis.Scripter, run func() *redis.Cmd) *redis.Cmd {
	cmd := run()
	if err := cmd.Err(); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return cmd
	}
	if err := s.Load(ctx, c).Err(); err != nil {
		cmd.SetErr(err)
		return cmd
	}
	return run()
}

// Names lists the scripts embedded, without their ".lua", sorted.
func Names() []string {
	entries, _ := fs.ReadDir(files, "scripts") // embedded: it cannot fail
	var names []string
	for _, entry := range entries {
		if name, ok := strings.CutSuffix(entry.Name(), ".lua"); ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// Source is the text of the script name ("append"), and whether there is one.
func Source(name string) (string, bool) {
	data, err := files.ReadFile("scripts/" + name + ".lua")
	if err != nil {
		return "", false
	}
	return string(data), true
}

// mustScript is the embedded script name; a name with no file is a fault of this package,
// caught by its tests before any release.
func mustScript(name string) *Script {
	source, ok := Source(name)
	if !ok {
		panic("lua: no embedded script " + name + ".lua; run go generate ./internal/lua")
	}
	return &Script{Name: name, Source: source, Script: redis.NewScript(source)}
}
