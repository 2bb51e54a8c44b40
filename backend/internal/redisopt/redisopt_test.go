package redisopt

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/internal/redisengine"
)

func TestResolve(t *testing.T) {
	got, err := Resolve[func(*Config)]("s", nil)
	require.NoError(t, err)
	require.Equal(t, redisengine.Options{Batch: DefaultBatch}, got, "defaults")
	got, err = Resolve("s", []func(*Config){ServerTime(), Batching(4), nil, ReplicaAck(2, time.Second, backend.AdmitUnconfirmed), Batching(1)})
	require.NoError(t, err)
	require.Equal(t, redisengine.Options{
		ServerTime: true,
		Ack:        redisengine.Ack{Replicas: 2, Timeout: time.Second, OnShort: backend.AdmitUnconfirmed},
		Batch:      1,
	}, got, "in order, the last batching wins, nil skipped")
	for _, n := range []int{0, -3} {
		_, err = Resolve("goredisstore", []func(*Config){Batching(n)})
		require.ErrorContains(t, err, "goredisstore: batch size")
	}
}

// stores are the two faces of the options.
var stores = []string{"goredisstore", "rueidisstore"}

// docs returns the doc comment of each top-level declaration of a store's
// options.go, and its package doc, with the store's name neutralised.
func docs(t *testing.T, store string) (map[string]string, string) {
	t.Helper()
	dir := filepath.Join("..", "..", store)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(dir, "options.go"), nil, parser.ParseComments)
	require.NoError(t, err)
	out := map[string]string{}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			out[d.Name.Name] = d.Doc.Text()
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					out[s.Name.Name] = d.Doc.Text()
				case *ast.ValueSpec:
					for _, n := range s.Names {
						out[n.Name] = d.Doc.Text()
					}
				}
			}
		}
	}
	main, err := parser.ParseFile(fset, filepath.Join(dir, store+".go"), nil, parser.ParseComments|parser.PackageClauseOnly)
	require.NoError(t, err)
	return out, strings.ReplaceAll(main.Doc.Text(), store, "STORE")
}

// section returns the part of a package doc under heading, up to the next.
func section(doc, heading string) string {
	_, rest, ok := strings.Cut(doc, "# "+heading+"\n")
	if !ok {
		return ""
	}
	body, _, _ := strings.Cut(rest, "\n# ")
	return body
}

// TestFacesMatch: the two stores' options have the same names and the same
// doc comments, and their package docs the same Batching and Time sections,
// so that what one store's docs say the other's say too.
func TestFacesMatch(t *testing.T) {
	a, aPkg := docs(t, stores[0])
	b, bPkg := docs(t, stores[1])
	for _, name := range []string{"Option", "WithServerTime", "WithReplicaAck", "DefaultBatch", "WithBatching"} {
		require.NotEmpty(t, a[name], "%s.%s has no doc comment", stores[0], name)
	}
	require.Equal(t, a, b, "the options of %s and %s differ: edit both options.go files alike", stores[0], stores[1])
	for _, h := range []string{"Batching", "Time"} {
		require.NotEmpty(t, section(aPkg, h), "%s's package doc has no %q section", stores[0], h)
		require.Equal(t, section(aPkg, h), section(bPkg, h), "the %q sections of the stores' package docs differ", h)
	}
}
