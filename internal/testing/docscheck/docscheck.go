// Package docscheck checks that the documentation's lists of algorithms
// name every registered algorithm (algorithms.Names), so that a new
// registry entry cannot go undocumented.
package docscheck

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"

	"github.com/limitkit/limitkit/algorithms"
)

// The documents that list the algorithms.
const (
	LimiterDoc      = "limiter package doc"
	ConfigAlgorithm = "limiter.Config.Algorithm doc"
	AlgorithmsDoc   = "algorithms package doc"
	ReadmeTable     = "README.md table under ## Choosing an algorithm"
)

// Missing reads the documents under the module root and returns, for each
// one, the names it does not mention; an empty map means every document
// names every one of names.
func Missing(root string, names []algorithms.Name) (map[string][]algorithms.Name, error) {
	texts := map[string]string{}
	var err error
	if texts[LimiterDoc], err = packageDoc(filepath.Join(root, "limiter")); err != nil {
		return nil, err
	}
	if texts[ConfigAlgorithm], err = fieldDoc(filepath.Join(root, "limiter"), "Config", "Algorithm"); err != nil {
		return nil, err
	}
	if texts[AlgorithmsDoc], err = packageDoc(filepath.Join(root, "algorithms")); err != nil {
		return nil, err
	}
	if texts[ReadmeTable], err = readmeTable(filepath.Join(root, "README.md"), "## Choosing an algorithm"); err != nil {
		return nil, err
	}
	// How each document spells a name.
	spell := map[string]func(algorithms.Name) string{
		LimiterDoc:      func(n algorithms.Name) string { return `"` + string(n) + `"` },
		ConfigAlgorithm: func(n algorithms.Name) string { return `"` + string(n) + `"` },
		AlgorithmsDoc:   func(n algorithms.Name) string { return "- " + string(n) + ":" },
		ReadmeTable:     func(n algorithms.Name) string { return "| `" + string(n) + "`" },
	}
	missing := map[string][]algorithms.Name{}
	for doc, text := range texts {
		for _, n := range names {
			if !strings.Contains(text, spell[doc](n)) {
				missing[doc] = append(missing[doc], n)
			}
		}
	}
	return missing, nil
}

// parse parses the package in dir (tests excluded) with comments.
func parse(dir string) ([]*ast.File, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("docscheck: %w", err)
	}
	fset := token.NewFileSet()
	var files []*ast.File
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("docscheck: %w", err)
		}
		files = append(files, f)
	}
	return files, nil
}

func packageDoc(dir string) (string, error) {
	files, err := parse(dir)
	if err != nil {
		return "", err
	}
	for _, f := range files {
		if f.Doc != nil {
			return f.Doc.Text(), nil
		}
	}
	return "", fmt.Errorf("docscheck: no package doc in %s", dir)
}

func fieldDoc(dir, typ, field string) (string, error) {
	files, err := parse(dir)
	if err != nil {
		return "", err
	}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range g.Specs {
				ts, ok := spec.(*ast.TypeSpec)
				if !ok || ts.Name.Name != typ {
					continue
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				for _, fl := range st.Fields.List {
					for _, n := range fl.Names {
						if n.Name == field && fl.Doc != nil {
							return fl.Doc.Text(), nil
						}
					}
				}
			}
		}
	}
	return "", fmt.Errorf("docscheck: no doc on %s.%s in %s", typ, field, dir)
}

// readmeTable returns the table rows (lines starting with "|") of the
// first table after the heading.
func readmeTable(path, heading string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("docscheck: %w", err)
	}
	defer f.Close()
	var rows []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == heading:
			in = true
		case in && strings.HasPrefix(line, "|"):
			rows = append(rows, line)
		case in && len(rows) > 0:
			return strings.Join(rows, "\n"), nil
		}
	}
	if len(rows) == 0 {
		return "", fmt.Errorf("docscheck: no table under %q in %s", heading, path)
	}
	return strings.Join(rows, "\n"), sc.Err()
}
