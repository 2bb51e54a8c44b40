package algorithms

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// cited finds file names (name.go, dir/name.lua, name.md) in a line.
var cited = regexp.MustCompile(`[A-Za-z0-9_./-]+\.(?:go|lua|md)\b`)

// missingCitations returns the files that the comments of text (a file of
// this directory; Go's // and Lua's -- comments) cite and that exist
// neither here nor from the module root (root). A comment naming a file
// that was renamed or removed misleads its reader.
func missingCitations(text, root string) []string {
	var out []string
	for line := range strings.Lines(text) {
		i := strings.Index(line, "//")
		if j := strings.Index(line, "--"); i < 0 || (j >= 0 && j < i) {
			i = j
		}
		if i < 0 {
			continue
		}
		for _, name := range cited.FindAllString(line[i:], -1) {
			if name == "name.go" || name == "name.lua" { // the registry's placeholder
				continue
			}
			_, here := os.Stat(name)
			_, fromRoot := os.Stat(filepath.Join(root, name))
			if here != nil && fromRoot != nil {
				out = append(out, name)
			}
		}
	}
	return out
}

func TestCommentsCiteFilesThatExist(t *testing.T) {
	for _, pattern := range []string{"*.go", "*.lua"} {
		files, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if f == "comments_test.go" { // cites gone files as examples
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if miss := missingCitations(string(b), ".."); len(miss) > 0 {
				t.Errorf("%s: comments cite %q, which do not exist", f, miss)
			}
		}
	}
}

// TestMissingCitationsCatchesAGoneFile is the control: the comment
// loglib.lua once had (slidinglog.go, gone) is caught; the file it cites
// now, a path from the module root and a string outside a comment are not.
func TestMissingCitationsCatchesAGoneFile(t *testing.T) {
	text := "-- the Lua twin of slidingLogTake (slidinglog.go)\n" +
		"-- the Lua twin of slidingLogTake (sliding_log.go), see docs/algorithms.md\n" +
		"local s = 'gone.lua'\n" +
		"// and Go's: ring.go, nowhere.go\n"
	got := missingCitations(text, "..")
	if strings.Join(got, " ") != "slidinglog.go nowhere.go" {
		t.Fatalf("missingCitations = %q, want [slidinglog.go nowhere.go]", got)
	}
}
