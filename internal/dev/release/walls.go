package main

import (
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// checkWalls refuses a release in which the shipped code (test files
// aside) of a published module imports another module's internal
// package: a user's build may pick the two modules at different versions,
// and an internal package keeps no promise across them. mods are all the
// repository's modules, at root.
func checkWalls(root string, mods []Module) error {
	var breaches []string
	for _, m := range mods {
		if !m.published() {
			continue // its code is built only in this repository, at one commit
		}
		got, err := wallBreaches(root, m, mods)
		if err != nil {
			return err
		}
		breaches = append(breaches, got...)
	}
	if len(breaches) > 0 {
		return fmt.Errorf("a module imports another module's internal package, which keeps no promise across versions; make the package public with a stability note, or stop importing it:\n%s", strings.Join(breaches, "\n"))
	}
	return nil
}

// wallBreaches lists the imports of m's non-test files of internal
// packages of the other modules of mods, as "file imports path".
func wallBreaches(root string, m Module, mods []Module) ([]string, error) {
	var out []string
	fset := token.NewFileSet()
	top := filepath.Join(root, filepath.FromSlash(m.Dir))
	err := filepath.WalkDir(top, func(file string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, file)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if file != top && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || slices.ContainsFunc(mods, func(o Module) bool { return o.Dir == rel })) {
				return filepath.SkipDir // another module's, or not code
			}
			return nil
		}
		if !strings.HasSuffix(file, ".go") || strings.HasSuffix(file, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, file, nil, parser.ImportsOnly)
		if err != nil {
			return fmt.Errorf("reading the imports of %s: %w", rel, err)
		}
		for _, spec := range f.Imports {
			p, _ := strconv.Unquote(spec.Path.Value)
			if o, ok := owner(p, mods); ok && o.Path != m.Path && isInternal(strings.TrimPrefix(p, o.Path)) {
				out = append(out, fmt.Sprintf("%s (module %s) imports %s (module %s)", rel, m.Path, p, o.Path))
			}
		}
		return nil
	})
	return out, err
}

// owner returns the module of mods whose path is the longest prefix of the
// import path p.
func owner(p string, mods []Module) (Module, bool) {
	var best Module
	found := false
	for _, m := range mods {
		if (p == m.Path || strings.HasPrefix(p, m.Path+"/")) && len(m.Path) >= len(best.Path) {
			best, found = m, true
		}
	}
	return best, found
}

// isInternal reports whether rest, an import path within its module (with
// its leading slash), names an internal package.
func isInternal(rest string) bool {
	return slices.Contains(strings.Split(rest, "/"), "internal")
}
