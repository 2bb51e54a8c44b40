package docscheck

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// cited finds file names (name.go, dir/name.lua, name.md) in a comment.
// YAML names are left out: the comments name example config files.
var cited = regexp.MustCompile(`[A-Za-z0-9_./-]+\.(?:go|lua|md)\b`)

// commentMarks are the comment openers of the files the check reads, by
// extension.
var commentMarks = map[string][]string{
	".go":   {"//"},
	".lua":  {"--"},
	".yaml": {"#"},
	".yml":  {"#"},
}

// MissingCitations returns the files that the comments of text cite and
// that exist from none of dirs (the file's folder, its module's root, the
// repository's root, ...) nor, when files is not nil, as the end of one of
// its paths (a name cited without its folder). marks open a comment (Go's
// //, Lua's --, YAML's #). Names in URLs, and names such as _test.go, are
// left alone (see placeholder). A comment naming a file that was renamed
// or removed misleads its reader.
func MissingCitations(text string, marks []string, files []string, dirs ...string) []string {
	var out []string
	for line := range strings.Lines(text) {
		i := -1
		for _, m := range marks {
			if j := strings.Index(line, m); j >= 0 && (i < 0 || j < i) {
				i = j
			}
		}
		if i < 0 {
			continue
		}
		comment := line[i:]
		for _, loc := range cited.FindAllStringIndex(comment, -1) {
			name := comment[loc[0]:loc[1]]
			if placeholder(name, comment[:loc[0]]) {
				continue
			}
			if !existsIn(name, dirs) && !endsOne(name, files) {
				out = append(out, name)
			}
		}
	}
	return out
}

// placeholder reports whether name, after before in a comment, is no
// file's name: a placeholder (name.go, file.md), a suffix (_test.go), a
// URL's part or a command's output file (-o results.md).
func placeholder(name, before string) bool {
	base := path.Base(name)
	return strings.HasPrefix(base, "name.") || strings.HasPrefix(base, "file.") || strings.HasPrefix(name, "_") ||
		strings.HasPrefix(name, "//") || strings.HasSuffix(before, ":") || strings.HasSuffix(before, "-o ")
}

func endsOne(name string, files []string) bool {
	for _, f := range files {
		if f == name || strings.HasSuffix(f, "/"+name) {
			return true
		}
	}
	return false
}

func existsIn(name string, dirs []string) bool {
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, filepath.FromSlash(name))); err == nil {
			return true
		}
	}
	return false
}

// CommentCitations walks every module under root and returns, by file
// (relative to root), the files its comments cite that do not exist (see
// MissingCitations). Dot folders are skipped; testdata is read.
func CommentCitations(root string, skip func(rel string) bool) (map[string][]string, error) {
	var files []string
	err := walk(root, func(rel, _ string) error {
		files = append(files, rel)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	err = walk(root, func(rel, path string) error {
		marks, ok := commentMarks[filepath.Ext(path)]
		if !ok || skip(rel) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		if miss := MissingCitations(string(b), marks, files, dir, moduleRoot(root, dir), root); len(miss) > 0 {
			out[rel] = miss
		}
		return nil
	})
	return out, err
}

// walk calls f with each file under root, by its path relative to root
// (slash-separated) and its path; dot folders are skipped.
func walk(root string, f func(rel, path string) error) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if path != root && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		return f(rel, path)
	})
}

// moduleRoot returns the folder of the go.mod nearest above dir, up to
// root.
func moduleRoot(root, dir string) string {
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil || d == root || d == filepath.Dir(d) {
			return d
		}
	}
}
