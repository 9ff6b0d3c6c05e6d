// Package lua holds the ledger's Lua scripts, the protocol every language's Redis store speaks:
// copies of ledger_bus/store/lua/*.lua made by `go generate` (gen/), byte for byte, embedded in
// the binary, each ready to run as a go-redis Script (EVALSHA, loaded by EVAL when the server
// has not got it). A test holds every copy identical to its original.
package lua

//go:generate go run ./gen

import (
	"embed"
	"io/fs"
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"
)

//go:embed scripts/*.lua
var files embed.FS

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
