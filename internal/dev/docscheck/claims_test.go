package docscheck

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The repository's documents pass every claims check.
func TestDocsClaimsHold(t *testing.T) {
	for name, check := range map[string]func(string) ([]string, error){
		"BrokenBullets": BrokenBullets, "MissingTests": MissingTests, "UncoveredModules": UncoveredModules,
		"UnknownFlags": UnknownFlags, "ExampleRows": ExampleRows,
	} {
		bad, err := check(root)
		require.NoError(t, err, name)
		require.Empty(t, bad, name)
	}
}

// claimsRepo is a small repository with one defect of each kind, each
// beside a control that must pass.
func claimsRepo(t *testing.T) string {
	dir := t.TempDir()
	write(t, dir, "go.work", "go 1.26\n\nuse (\n\t.\n\t./lib/sub\n)\n")
	write(t, dir, "lib/a_test.go", "package lib\n\nfunc TestAlpha(t *testing.T) {}\n")
	write(t, dir, "lib/sub/b_test.go", "package sub\n\nfunc TestRef_Beta(t *testing.T) {}\n")
	write(t, dir, "other/c_test.go", "package other\n\nfunc TestGamma(t *testing.T) {}\n")
	write(t, dir, "examples/demo/main.go", "// Command demo: 100 requests per 60 s.\npackage main\n\nvar _ = flag.Int(\"n\", 1, \"\")\nvar _ = flag.StringVar(&x, \"redis\", \"\", \"\")\n")
	write(t, dir, "README.md", strings.Join([]string{
		"# Top",
		"",
		"- a bullet",
		"  its continuation (control)",
		"",
		"## Lost",
		"",
		"  a continuation whose bullet is gone",
		"",
		"`TestAlpha` is cited (control), `TestMissing` is not a test.",
		"```sh",
		"go test -run 'TestRef_' ./lib/sub/ ./other/",
		"go test -run TestAlpha ./lib/...",
		"go test ./lib/... ./lib/sub/...",
		"go run ./examples/demo -n 3 -redis auto -bogus",
		"```",
		"",
		"| command | shows |",
		"|---|---|",
		"| `go run ./examples/demo` | 100 requests per 60 s (control) |",
		"| `go run ./examples/demo` | 100 requests per 90 s |",
	}, "\n"))
	return dir
}

func TestClaimsChecksCatchEachKind(t *testing.T) {
	dir := claimsRepo(t)
	for _, c := range []struct {
		check func(string) ([]string, error)
		want  []string
	}{
		{BrokenBullets, []string{"README.md:8: an indented line outside a list"}},
		{MissingTests, []string{"README.md:10: TestMissing: no test file has it", "README.md:12: -run TestRef_ matches no test in other"}},
		{UncoveredModules, []string{"README.md:13: ./lib/... leaves out the module lib/sub"}},
		{UnknownFlags, []string{"README.md:15: go run ./examples/demo: it defines no flag -bogus"}},
		{ExampleRows, []string{"README.md:21: ./examples/demo: the row says 90"}},
	} {
		bad, err := c.check(dir)
		require.NoError(t, err)
		require.Len(t, bad, len(c.want), "%q", bad)
		for i, w := range c.want {
			require.Contains(t, bad[i], w)
		}
	}
}
