package examples

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the path every limitkit package starts with.
const module = "github.com/limitkit/limitkit"

// forbidden says why an example may not import path, or "" when it may:
// an example is code for users to copy, so it uses what they can import.
func forbidden(path string) string {
	if path != module && !strings.HasPrefix(path, module+"/") {
		return ""
	}
	elems := strings.Split(strings.TrimPrefix(path, module), "/")
	switch {
	case slices.Contains(elems, "internal"):
		return "an internal package, which users cannot import"
	case strings.HasSuffix(elems[len(elems)-1], "test"):
		return "a test package"
	}
	return ""
}

// badImports lists the imports of the examples' programs under root (every
// .go file but tests, whatever its build tags; the examples' own test
// helpers under internal/ are left out) that users could not copy.
func badImports(root string) ([]string, error) {
	var bad []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "internal" || d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			if why := forbidden(p); why != "" {
				rel, _ := filepath.Rel(root, path)
				bad = append(bad, rel+" imports "+p+": "+why)
			}
		}
		return nil
	})
	return bad, err
}

// TestExamplesUsePublicAPI: no example program imports an internal or test
// package of limitkit.
func TestExamplesUsePublicAPI(t *testing.T) {
	bad, err := badImports(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bad {
		t.Error(b)
	}
}

// TestBadImportsCatches is the control: an example importing the Redis
// script runner, a test helper, or a package of the examples' own internal
// directory is caught, whatever its build tags, while a test file may use
// test helpers.
func TestBadImportsCatches(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"a/main.go":      "package main\n\nimport (\n\t\"fmt\"\n\n\t\"github.com/limitkit/limitkit/internal/rediswire\"\n\t\"github.com/limitkit/limitkit/limiter\"\n)\n",
		"a/redis.go":     "//go:build redis\n\npackage main\n\nimport \"github.com/limitkit/limitkit/examples/internal/stores\"\n",
		"b/main.go":      "package main\n\nimport \"github.com/limitkit/limitkit/backend/storetest\"\n",
		"b/main_test.go": "package main\n\nimport \"github.com/limitkit/limitkit/internal/dev/redistest\"\n",
	}
	for name, src := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bad, err := badImports(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		filepath.FromSlash("a/main.go") + " imports github.com/limitkit/limitkit/internal/rediswire: an internal package, which users cannot import",
		filepath.FromSlash("a/redis.go") + " imports github.com/limitkit/limitkit/examples/internal/stores: an internal package, which users cannot import",
		filepath.FromSlash("b/main.go") + " imports github.com/limitkit/limitkit/backend/storetest: a test package",
	}
	if !slices.Equal(bad, want) {
		t.Errorf("found:\n%s\nwant:\n%s", strings.Join(bad, "\n"), strings.Join(want, "\n"))
	}
}
