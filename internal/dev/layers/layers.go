// Package layers holds the repository to its floors: each package sits on
// one, from the ground up (clock, algorithms and the shipped helpers;
// backend with its stores and wrappers; limiter and rls side by side;
// commands and examples), and a package's code imports only its own floor
// and those below it. The dev wing, internal/dev, stands beside the
// floors: it may import any of them, and no shipped package imports it.
// Test files are left out: a test may use the harness and the floors
// above it without the package's users linking either.
package layers

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// DevWing is the folder of the repository's dev tooling: test harnesses,
// benchmarks and tools that no user links.
const DevWing = "internal/dev"

// The floors, from the ground up.
const (
	Ground   = iota // clock, algorithms, the shipped internal helpers
	Backend         // backend/... and fallback: stores and store wrappers
	API             // limiter/... and rls
	Commands        // cmd/..., examples/..., rls/cmd/...
)

// floors maps a folder of the repository to its floor; a package is on the
// floor of the longest folder it is in.
var floors = map[string]int{
	"clock":      Ground,
	"algorithms": Ground,
	"internal":   Ground,
	// A concurrency limit on clock alone, whose Prometheus metrics
	// backend/observe/promobserve exports with the stores'.
	"limiter/adaptive": Ground,
	"backend":          Backend,
	"fallback":         Backend,
	// The Redis wire format reads backend's types; it sits in the root
	// internal/ so that cmd/limitkit-inspect may import it too.
	"internal/rediswire": Backend,
	// The limiter's direct call into the memory store reads backend's
	// types; the root internal/ is the folder both may import.
	"internal/hotpath": Backend,
	"limiter":          API,
	"rls":              API,
	"cmd":              Commands,
	"examples":         Commands,
	"rls/cmd":          Commands,
}

// IsDev reports whether rel, a folder relative to the repository's root
// (slash-separated), is in the dev wing.
func IsDev(rel string) bool {
	return rel == DevWing || strings.HasPrefix(rel, DevWing+"/")
}

// Floor returns the floor of the folder rel (relative to the repository's
// root, slash-separated); ok is false when rel is in no floor's folder.
func Floor(rel string) (floor int, ok bool) {
	for p := rel; p != "." && p != ""; p = parent(p) {
		if f, ok := floors[p]; ok {
			return f, true
		}
	}
	return 0, false
}

func parent(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return ""
	}
	return p[:i]
}

// Violation is one import that breaks the floors.
type Violation struct {
	File string // the importing file, relative to the root
	Path string // the import path
	Why  string
}

func (v Violation) String() string { return fmt.Sprintf("%s imports %s: %s", v.File, v.Path, v.Why) }

// Check reads the imports of every non-test Go file under root (every
// module; testdata and dot folders skipped) and returns those that break
// the floors: a shipped package importing the dev wing, a package
// importing a floor above its own, a shipped package in no floor.
func Check(root string) ([]Violation, error) {
	rootPath, err := modulePath(filepath.Join(root, "go.mod"))
	if err != nil {
		return nil, err
	}
	var out []Violation
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("layers: %w", err)
		}
		for _, spec := range f.Imports {
			p, err := strconv.Unquote(spec.Path.Value)
			if err != nil {
				return fmt.Errorf("layers: %s: %w", rel, err)
			}
			if v, bad := judge(rel, parent(rel), p, rootPath); bad {
				out = append(out, v)
			}
		}
		return nil
	})
	return out, err
}

// judge decides one import of the file rel, in folder dir, of path p.
func judge(rel, dir, p, rootPath string) (Violation, bool) {
	if IsDev(dir) {
		return Violation{}, false
	}
	from, ok := Floor(dir)
	if !ok {
		return Violation{rel, p, "its folder is on no floor; add it to package layers' floors"}, true
	}
	if !strings.HasPrefix(p, rootPath+"/") {
		return Violation{}, false
	}
	to := strings.TrimPrefix(p, rootPath+"/")
	if IsDev(to) {
		return Violation{rel, p, "shipped code imports the dev wing (" + DevWing + "); move what it needs out of the wing"}, true
	}
	if f, ok := Floor(to); ok && f > from {
		return Violation{rel, p, fmt.Sprintf("floor %d imports floor %d, above it", from, f)}, true
	}
	return Violation{}, false
}

// modulePath reads the module path of a go.mod file.
func modulePath(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("layers: %w", err)
	}
	for line := range strings.Lines(string(b)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(p), `"`), nil
		}
	}
	return "", fmt.Errorf("layers: %s names no module", file)
}
