package goredisstore_test

import (
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/internal/dev/scripttest"
)

// newMiniredis returns a store over an in-process miniredis, whose keys
// never expire unless the test moves its clock: the Lua twins then match
// the Go engine even across long jumps of the request time.
func newMiniredis(t *testing.T) (*goredisstore.Store, *miniredis.Miniredis) {
	mr := miniredis.RunT(t)
	client := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = client.Close() })
	s, err := goredisstore.New(client)
	require.NoError(t, err)
	return s, mr
}

func TestConformanceMiniredis(t *testing.T) {
	s, _ := newMiniredis(t)
	storetest.Run(t, s)
}

func TestDifferentialMiniredis(t *testing.T) {
	s, _ := newMiniredis(t)
	for seed := range uint64(2) {
		scripttest.Differential(t.Context(), t, s, seed, 400)
	}
}
