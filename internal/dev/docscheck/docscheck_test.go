package docscheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
)

// The module root, from this package.
const root = "../../.."

func TestDocsNameEveryAlgorithm(t *testing.T) {
	missing, err := Missing(root, algorithms.Names())
	require.NoError(t, err)
	require.Empty(t, missing, "the docs must name every registered algorithm")
}

func TestMissingCatchesAnUndocumentedName(t *testing.T) {
	// Control: a name no document mentions is reported by every document,
	// the tables found in their new places included.
	missing, err := Missing(root, append(algorithms.Names(), "leaky_bucket"))
	require.NoError(t, err)
	tables, err := AlgorithmTables(root)
	require.NoError(t, err)
	want := map[string][]algorithms.Name{}
	for _, doc := range Documents {
		want[doc] = []algorithms.Name{"leaky_bucket"}
	}
	for doc := range tables {
		want[doc] = []algorithms.Name{"leaky_bucket"}
	}
	require.Equal(t, want, missing)
}

// write makes a file under dir, creating its directories.
func write(t *testing.T, dir, rel, text string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(rel))
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
}

func TestAlgorithmTablesFindsTablesWhereverTheyMove(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "README.md", "# x\n\n## Choosing an algorithm\n\n| algorithm | what |\n|---|---|\n| `gcra` | a |\n\n| path | what |\n|---|---|\n| `gcra` | not an algorithm table |\n")
	write(t, dir, "docs/moved.md", "# Moved\n\n```\n| algorithm | in code |\n```\n\n## Here now\n\n| algorithm | what |\n|---|---|\n| `sliding_log` | b |\n")
	tables, err := AlgorithmTables(dir)
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		ReadmeTable:                             "| algorithm | what |\n|---|---|\n| `gcra` | a |",
		"docs/moved.md table under ## Here now": "| algorithm | what |\n|---|---|\n| `sliding_log` | b |",
	}, tables)
}

func TestMissingRefusesALostTable(t *testing.T) {
	// Control: with the accuracy table gone from docs/algorithms.md, the
	// check fails rather than checking less.
	dir := t.TempDir()
	for _, rel := range []string{"limiter", "algorithms"} {
		entries, err := os.ReadDir(filepath.Join(root, rel))
		require.NoError(t, err)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".go") && !strings.HasSuffix(e.Name(), "_test.go") {
				b, err := os.ReadFile(filepath.Join(root, rel, e.Name()))
				require.NoError(t, err)
				write(t, dir, rel+"/"+e.Name(), string(b))
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	write(t, dir, "README.md", string(readme))
	write(t, dir, "docs/algorithms.md", "# Algorithms\n\n## Accuracy, memory and speed\n\nNo table any more.\n")
	_, err = Missing(dir, algorithms.Names())
	require.ErrorContains(t, err, AccuracyTable)
}

func TestLinksResolve(t *testing.T) {
	broken, err := BrokenLinks(root)
	require.NoError(t, err)
	require.Empty(t, broken, "every relative link in README.md and docs/*.md must reach a file and heading")
}

func TestBrokenLinksCatchesBadLinks(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "LICENSE", "MIT\n")
	write(t, dir, "README.md", strings.Join([]string{
		"# Top",
		"[ok](docs/guide.md#redis-cluster) [ok](#top) [ok](LICENSE) [web](https://example.com/#x)",
		"[gone](docs/missing.md) [bad anchor](docs/guide.md#redis) `[in code](nowhere.md)`",
		"```",
		"[in a fence](nowhere.md)",
		"```",
	}, "\n"))
	write(t, dir, "docs/guide.md", "# Guide\n\n## Redis Cluster\n\n[back](../README.md#top) [self](#guide) [up](#nope)\n")
	broken, err := BrokenLinks(dir)
	require.NoError(t, err)
	require.Len(t, broken, 3, "%q", broken)
	require.Contains(t, broken[0], "README.md:3: docs/missing.md: no such file")
	require.Contains(t, broken[1], "README.md:3: docs/guide.md#redis: no heading #redis in docs/guide.md")
	require.Contains(t, broken[2], "docs/guide.md:5: #nope: no heading #nope")
}

func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"Configuration files: `limiter/config`":  "configuration-files-limiterconfig",
		"Arrival order: what the logs deny":      "arrival-order-what-the-logs-deny",
		"TLS with a private CA, and an ACL user": "tls-with-a-private-ca-and-an-acl-user",
		"Envoy: the rate limit service `rls/`":   "envoy-the-rate-limit-service-rls",
		"Example: at most 2 uploads in flight":   "example-at-most-2-uploads-in-flight",
		"[Linked](x.md) and `sliding_log`":       "linked-and-sliding_log",
		"What 2× costs":                          "what-2-costs",
		"Über-limits":                            "über-limits",
	} {
		require.Equal(t, want, Slug(heading), heading)
	}
}

func TestRepeatedHeadingsGetNumberedAnchors(t *testing.T) {
	a := anchors([]string{"# Notes", "## Example", "## Example", "### Example"})
	require.Equal(t, map[string]bool{"notes": true, "example": true, "example-1": true, "example-2": true}, a)
}

func TestSectionsCountEveryLine(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.md", "intro\n# One\n\ntext\n```\n# not a heading\n```\n## Two\n\n")
	s, err := Sections(filepath.Join(dir, "a.md"))
	require.NoError(t, err)
	require.Equal(t, []Section{
		{Heading: "", Line: 1, Lines: 1},
		{Heading: "# One", Line: 2, Lines: 6},
		{Heading: "## Two", Line: 8, Lines: 2},
	}, s)
}

// The README is the front door (issue 23): short, in short sections, and
// linking every guide.
const (
	maxReadmeLines  = 350
	maxSectionLines = 60
)

func TestReadmeIsAFrontDoor(t *testing.T) {
	sections, err := Sections(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	total := 0
	for _, s := range sections {
		total += s.Lines
		require.LessOrEqual(t, s.Lines, maxSectionLines, "README.md:%d %q: move the detail into a guide under docs/", s.Line, s.Heading)
	}
	require.LessOrEqual(t, total, maxReadmeLines, "README.md: move the detail into a guide under docs/")

	unlinked, err := Unlinked(root)
	require.NoError(t, err)
	require.Empty(t, unlinked, "every guide must be linked from README.md")
}

func TestUnlinkedFindsAnOrphanGuide(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "README.md", "# x\n[a](docs/a.md#top) `[b](docs/b.md)`\n")
	write(t, dir, "docs/a.md", "# Top\n")
	write(t, dir, "docs/b.md", "# B\n")
	unlinked, err := Unlinked(dir)
	require.NoError(t, err)
	require.Equal(t, []string{"docs/b.md"}, unlinked)
}
