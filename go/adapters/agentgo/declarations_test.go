package agentgo_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// declaredTypes is the types the non-test Go files of dir declare (exported only, or all),
// and whether any of them imports path.
func declaredTypes(t *testing.T, dir string, exportedOnly bool, path string) (types []string, imports bool) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, spec := range file.Imports {
			imports = imports || spec.Path.Value == `"`+path+`"`
		}
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				name := spec.(*ast.TypeSpec).Name
				if name.IsExported() || !exportedOnly {
					types = append(types, name.Name)
				}
			}
		}
	}
	return types, imports
}

// TestTheAdapterDeclaresNoTypeOfAgentGos holds the adapter to AgentGo's own types: none of the
// types AgentGo's package exports (the module the build resolves, the stand-in here, AgentGo
// itself in a user's build) is declared again by the adapter, under its name or any other
// case of it, and the adapter imports AgentGo.
func TestTheAdapterDeclaresNoTypeOfAgentGos(t *testing.T) {
	const agentgo = "github.com/compforge/agentgo"
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", agentgo).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", agentgo, err)
	}
	theirs, _ := declaredTypes(t, strings.TrimSpace(string(out)), true, "")
	if len(theirs) < 20 {
		t.Fatalf("AgentGo's package exports %d types: %q", len(theirs), theirs)
	}
	ours, imports := declaredTypes(t, ".", false, agentgo)
	if !imports {
		t.Fatal("the adapter does not import AgentGo")
	}
	for _, name := range ours {
		if slices.ContainsFunc(theirs, func(theirs string) bool { return strings.EqualFold(theirs, name) }) {
			t.Errorf("the adapter declares %s, a type AgentGo exports: use agentgo.%s", name, name)
		}
	}
}
