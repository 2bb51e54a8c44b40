// Package exampletest runs an example's check on every kind of store the
// example can open: in memory, and on a real redis-server through each
// client library.
package exampletest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// Opener opens the store an example keeps its state in (see stores.Open):
// in memory for an empty url.
type Opener func(url, client string) (backend.Store, string, func(), error)

// EveryStore runs check as subtests: "memory", then "go-redis" and
// "rueidis" against one redis-server started for the test.
func EveryStore(t *testing.T, open Opener, check func(t *testing.T, store backend.Store, where string)) {
	t.Helper()
	run := func(t *testing.T, url, client string) {
		store, where, closeStore, err := open(url, client)
		require.NoError(t, err)
		defer closeStore()
		check(t, store, where)
	}
	t.Run("memory", func(t *testing.T) { run(t, "", "") })
	srv := redistest.Start(t)
	for _, client := range []string{"go-redis", "rueidis"} {
		t.Run(client, func(t *testing.T) { run(t, "redis://"+srv.Addr()+"/0", client) })
	}
}
