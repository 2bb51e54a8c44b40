package layers

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// root is the repository's root (every module), from this package.
const root = "../../.."

func TestFloorsHold(t *testing.T) {
	vs, err := Check(root)
	require.NoError(t, err)
	for _, v := range vs {
		t.Error(v)
	}
}

// TestCheckCatchesEachBreach is the control: in a made-up repository, a
// shipped package importing the dev wing, algorithms importing backend and
// a package on no floor are each reported; the dev wing importing limiter,
// a test file importing the wing, an import of a lower floor and one from
// outside the module are not.
func TestCheckCatchesEachBreach(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) {
		path := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(src), 0o644))
	}
	imp := func(pkg string, paths ...string) string {
		src := "package " + pkg + "\n"
		for _, p := range paths {
			src += "import _ \"" + p + "\"\n"
		}
		return src
	}
	const m = "example.com/house"
	write("go.mod", "module "+m+"\n")
	write("backend/conn/conn.go", imp("conn", m+"/internal/dev/redistest", m+"/algorithms"))
	write("backend/conn/conn_test.go", imp("conn", m+"/internal/dev/redistest", m+"/limiter"))
	write("algorithms/reg.go", imp("algorithms", m+"/backend", "fmt"))
	write("internal/dev/modeltest/m.go", imp("modeltest", m+"/limiter", m+"/rls"))
	write("attic/a.go", imp("attic", "fmt"))
	write("limiter/testdata/x/x.go", imp("x", m+"/cmd/tool"))

	vs, err := Check(dir)
	require.NoError(t, err)
	var got []string
	for _, v := range vs {
		got = append(got, v.File+" "+v.Path)
	}
	require.ElementsMatch(t, []string{
		"algorithms/reg.go " + m + "/backend",
		"attic/a.go fmt",
		"backend/conn/conn.go " + m + "/internal/dev/redistest",
	}, got)
}

func TestFloorAndIsDev(t *testing.T) {
	for rel, want := range map[string]int{
		"clock": Ground, "internal/option": Ground, "internal/rediswire": Backend, "backend/observe/promobserve": Backend,
		"fallback": Backend, "rls": API, "limiter/transport": API, "rls/cmd/limitkit-rls": Commands,
	} {
		got, ok := Floor(rel)
		require.True(t, ok, rel)
		require.Equal(t, want, got, rel)
	}
	_, ok := Floor("attic")
	require.False(t, ok)
	require.True(t, IsDev("internal/dev/benchmarks/harness"))
	require.False(t, IsDev("internal/devices"))
	require.False(t, IsDev("internal/rediswire"))
}
