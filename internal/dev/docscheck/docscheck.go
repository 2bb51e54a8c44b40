// Package docscheck checks the documentation against the code: every list
// of algorithms names every registered algorithm (algorithms.Names), so
// that a new registry entry cannot go undocumented, and every relative link
// in README.md and docs/*.md reaches an existing file and heading.
package docscheck

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/limitkit/limitkit/algorithms"
)

// The documents that list the algorithms. Tables are named
// "<path> table under <heading line>".
const (
	LimiterDoc      = "limiter package doc"
	ConfigAlgorithm = "limiter.Config.Algorithm doc"
	AlgorithmsDoc   = "algorithms package doc"
	ReadmeTable     = "README.md table under ## Choosing an algorithm"
	AccuracyTable   = "docs/algorithms.md table under ## Accuracy, memory and speed"
)

// Documents lists the documents Missing always reads; a table of algorithms
// found elsewhere (see AlgorithmTables) is checked as well.
var Documents = []string{LimiterDoc, ConfigAlgorithm, AlgorithmsDoc, ReadmeTable, AccuracyTable}

// Missing reads the documents under the module root and returns, for each
// one, the names it does not mention; an empty map means every document
// names every one of names. A document of Documents that cannot be found is
// an error, so that moving a list never silently drops its check.
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
	tables, err := AlgorithmTables(root)
	if err != nil {
		return nil, err
	}
	for _, want := range []string{ReadmeTable, AccuracyTable} {
		if _, ok := tables[want]; !ok {
			return nil, fmt.Errorf("docscheck: no table of algorithms (first column \"algorithm\") for %q; keep the table there or update docscheck", want)
		}
	}
	// How each document spells a name; every table as the README's.
	spell := map[string]func(algorithms.Name) string{
		LimiterDoc:      func(n algorithms.Name) string { return `"` + string(n) + `"` },
		ConfigAlgorithm: func(n algorithms.Name) string { return `"` + string(n) + `"` },
		AlgorithmsDoc:   func(n algorithms.Name) string { return "- " + string(n) + ":" },
	}
	inTable := func(n algorithms.Name) string { return "| `" + string(n) + "`" }
	for doc, rows := range tables {
		texts[doc] = rows
		spell[doc] = inTable
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

// AlgorithmTables finds every Markdown table in README.md and docs/*.md
// whose first header cell is "algorithm" and returns its rows, keyed
// "<path> table under <heading line>" (path relative to root, with /).
func AlgorithmTables(root string) (map[string]string, error) {
	files, err := markdownFiles(root)
	if err != nil {
		return nil, err
	}
	tables := map[string]string{}
	for _, rel := range files {
		lines, err := readLines(filepath.Join(root, rel))
		if err != nil {
			return nil, err
		}
		heading := ""
		var rows []string
		flush := func() {
			if len(rows) > 0 && firstCell(rows[0]) == "algorithm" {
				key := rel + " table under " + heading
				if prev, ok := tables[key]; ok {
					tables[key] = prev + "\n" + strings.Join(rows, "\n")
				} else {
					tables[key] = strings.Join(rows, "\n")
				}
			}
			rows = nil
		}
		for _, l := range prose(lines) {
			switch {
			case l.heading:
				flush()
				heading = l.text
			case strings.HasPrefix(l.text, "|"):
				rows = append(rows, l.text)
			default:
				flush()
			}
		}
		flush()
	}
	return tables, nil
}

func firstCell(row string) string {
	cells := strings.Split(strings.Trim(row, "|"), "|")
	return strings.TrimSpace(cells[0])
}

// markdownFiles lists README.md and docs/*.md under root, relative, sorted.
func markdownFiles(root string) ([]string, error) {
	files := []string{"README.md"}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, fmt.Errorf("docscheck: %w", err)
	}
	sort.Strings(docs)
	for _, d := range docs {
		files = append(files, "docs/"+filepath.Base(d))
	}
	return files, nil
}

func readLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("docscheck: %w", err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("docscheck: %s: %w", path, err)
	}
	return lines, nil
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
