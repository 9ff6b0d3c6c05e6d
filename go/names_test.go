package ledgerbus_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The SDK's package names say what they hold and leave its dependencies' names free: no
// package is named as an imported one is (go-redis is "redis"), and no package declares a type
// of its own name (store.Store).
func TestPackageNamesShadowNoImportAndDoNotStutter(t *testing.T) {
	packages := map[string]string{} // directory -> package name
	imported := map[string]bool{}   // the names the SDK's packages import under
	types := map[string][]string{}  // directory -> exported type names
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" ||
			fileExists(filepath.Join(path, "go.mod"))) {
			return filepath.SkipDir // another module, or no Go of this one
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		packages[dir] = file.Name.Name
		for _, spec := range file.Imports {
			name := strings.Trim(spec.Path.Value, `"`)
			if strings.HasPrefix(name, "github.com/ledger-bus/ledger-bus/") {
				continue // the SDK's own
			}
			if i := strings.LastIndex(name, "/"); i >= 0 {
				name = name[i+1:]
			}
			if strings.HasPrefix(name, "v") && len(name) <= 3 { // a major version suffix
				p := strings.Trim(spec.Path.Value, `"`)
				p = p[:strings.LastIndex(p, "/")]
				name = p[strings.LastIndex(p, "/")+1:]
			}
			if spec.Name == nil {
				imported[strings.TrimPrefix(name, "go-")] = true
			}
		}
		for _, decl := range file.Decls {
			if gen, ok := decl.(*ast.GenDecl); ok && gen.Tok == token.TYPE {
				for _, spec := range gen.Specs {
					if name := spec.(*ast.TypeSpec).Name; name.IsExported() {
						types[dir] = append(types[dir], name.Name)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(packages) < 8 {
		t.Fatalf("found %d packages", len(packages))
	}
	if !imported["redis"] {
		t.Fatal("go-redis not found among the imports: the walk is wrong")
	}
	for dir, name := range packages {
		if imported[name] && name != "ledgerbus" {
			t.Errorf("package %s (%s) has the name of a package the SDK imports", name, dir)
		}
		for _, typ := range types[dir] {
			if strings.EqualFold(typ, name) {
				t.Errorf("%s.%s stutters (%s)", name, typ, dir)
			}
		}
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
