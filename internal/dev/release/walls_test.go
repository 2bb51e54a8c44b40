package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWallsHold: no published module of this repository imports another
// module's internal package.
func TestWallsHold(t *testing.T) {
	root, err := git(t.Context(), ".", "rev-parse", "--show-toplevel")
	if err != nil {
		t.Skipf("not in a git checkout: %v", err)
	}
	_, mods, err := modules(t.Context(), root)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkWalls(root, mods); err != nil {
		t.Error(err)
	}
}

// TestWallsRefuseAnInternalImport is the control: in a made-up repository,
// rls's shipped code importing the root's internal/conf is refused; its
// own internal package, a test file, a public package of the root, a
// testdata folder and an unpublished module importing the root's internal
// packages are not.
func TestWallsRefuseAnInternalImport(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const m = "example.com/house"
	imp := func(pkg string, paths ...string) string {
		src := "package " + pkg + "\n"
		for _, p := range paths {
			src += "import _ \"" + p + "\"\n"
		}
		return src
	}
	mods := []Module{{Path: m}, {Path: m + "/rls", Dir: "rls"}, {Path: m + "/internal/bench", Dir: "internal/bench"}}
	write("rls/rls.go", imp("rls", m+"/rls/internal/x", m+"/conf"))
	write("rls/rls_test.go", imp("rls", m+"/internal/dev/redistest"))
	write("rls/testdata/t/t.go", imp("t", m+"/internal/conf"))
	write("internal/bench/b.go", imp("bench", m+"/internal/conf"))
	if err := checkWalls(dir, mods); err != nil {
		t.Fatalf("no breach yet: %v", err)
	}
	write("rls/parse.go", imp("rls", m+"/internal/conf"))
	err := checkWalls(dir, mods)
	if err == nil || !strings.Contains(err.Error(), "rls/parse.go (module "+m+"/rls) imports "+m+"/internal/conf (module "+m+")") {
		t.Fatalf("an internal import across modules: %v", err)
	}
}
