// Command gen copies the ledger's Lua scripts (ledger_bus/store/lua/*.lua, the one set every
// language runs) and their calling convention (protocol.json) into the lua package's scripts/
// directory, byte for byte, for go:embed: a package embeds files of its own directory only. A copy already right is left alone; a copy
// whose original is gone is removed.
//
// Run it with `go generate ./internal/lua` from the module's directory.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// protocol is the description of the scripts' KEYS, ARGV and replies.
const protocol = "protocol.json"

func main() {
	from := flag.String("from", "../../../ledger_bus/store/lua", "the directory of the original scripts")
	to := flag.String("to", "scripts", "the directory of the copies")
	flag.Parse()
	if err := copyScripts(*from, *to); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func copyScripts(from, to string) error {
	originals, err := filepath.Glob(filepath.Join(from, "*.lua"))
	if err != nil {
		return err
	}
	if len(originals) == 0 {
		return fmt.Errorf("no .lua scripts in %s", from)
	}
	originals = append(originals, filepath.Join(from, protocol))
	if err := os.MkdirAll(to, 0o755); err != nil {
		return err
	}
	kept := map[string]bool{}
	for _, original := range originals {
		name := filepath.Base(original)
		kept[name] = true
		data, err := os.ReadFile(original)
		if err != nil {
			return err
		}
		target := filepath.Join(to, name)
		if old, err := os.ReadFile(target); err == nil && bytes.Equal(old, data) {
			continue
		}
		// Written aside and renamed: a reader never sees half a script.
		part := target + ".part"
		if err := os.WriteFile(part, data, 0o644); err != nil {
			return err
		}
		if err := os.Rename(part, target); err != nil {
			return err
		}
	}
	copies, err := os.ReadDir(to)
	if err != nil {
		return err
	}
	for _, entry := range copies {
		if name := entry.Name(); (strings.HasSuffix(name, ".lua") || name == protocol) && !kept[name] {
			if err := os.Remove(filepath.Join(to, name)); err != nil {
				return err
			}
		}
	}
	return nil
}
