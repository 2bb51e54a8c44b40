package complexity

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/dev/layers"
)

// root is the repository's root (every module), from this package.
const root = "../../.."

// maxComplexity is the bound on every shipped function.
const maxComplexity = 20

// notShipped is the dev wing, whose code no user runs or imports: the
// test harness, the benchmarks and the repository's own tools.
func notShipped(rel string) bool { return layers.IsDev(filepath.ToSlash(rel)) }

func TestNoShippedFunctionOverTheBound(t *testing.T) {
	over, err := Over(root, maxComplexity, notShipped)
	require.NoError(t, err)
	for _, f := range over {
		t.Errorf("%s (%s:%d) has cyclomatic complexity %d, over %d: split it", f.Name, f.Pos.Filename, f.Pos.Line, f.N, maxComplexity)
	}
}

// branchy has gocyclo's count 9: 1, the if, && and ||, the two loops, two
// cases and one comm clause (defaults do not count).
const branchy = `package p

func straight() {}

func (s *S) branchy(a, b bool, xs []int, c chan int) {
	if a && b || !a {
	}
	for i := 0; i < 3; i++ {
	}
	for range xs {
	}
	switch {
	case a:
	case b:
	default:
	}
	select {
	case <-c:
	default:
	}
}
`

func TestOfCountsAsGocyclo(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "p.go", branchy, 0)
	require.NoError(t, err)
	got := map[string]int{}
	for _, d := range f.Decls {
		fn := d.(*ast.FuncDecl)
		got[funcName(fn)] = Of(fn.Body)
	}
	require.Equal(t, map[string]int{"straight": 1, "S.branchy": 9}, got)
}

// TestOverReportsAFunctionOverTheBound is the control: a file with a
// function of complexity 9 is reported under a bound of 8 and not of 9,
// and a test file or a skipped tree is never read.
func TestOverReportsAFunctionOverTheBound(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		path := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	}
	write("a/p.go", branchy)
	write("a/p_test.go", strings.Replace(branchy, "branchy", "testOnly", 1))
	write("skipped/p.go", branchy)
	skip := func(rel string) bool { return rel == "skipped" }

	over, err := Over(dir, 8, skip)
	require.NoError(t, err)
	require.Len(t, over, 1)
	require.Equal(t, "S.branchy", over[0].Name)
	require.Equal(t, 9, over[0].N)
	require.Equal(t, filepath.Join(dir, "a", "p.go"), over[0].Pos.Filename)

	over, err = Over(dir, 9, skip)
	require.NoError(t, err)
	require.Empty(t, over)
}
