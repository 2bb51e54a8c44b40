package storeurl

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

var clients = []string{GoRedis, Rueidis}

// take admits one unit on a fresh key through s, for a store that works.
func take(t *testing.T, s backend.Store) {
	t.Helper()
	res, err := s.Take(context.Background(), backend.Request{Key: backend.Key{Prefix: "limitkit:test:", ID: "k"},
		Rule: algorithms.Rule{Algorithm: algorithms.FixedWindow, Limit: 5, Window: time.Minute}, Cost: 1, Now: time.Now()})
	require.NoError(t, err)
	require.True(t, res.Allowed)
}

// TestOpenEveryForm: each URL form opens a store that decides, with a Bus
// on the same client (nil for memory).
func TestOpenEveryForm(t *testing.T) {
	op, err := Open(t.Context(), "memory://?max_keys=10")
	require.NoError(t, err)
	require.Nil(t, op.Bus)
	require.Equal(t, Memory, op.Kind)
	take(t, op.Store)
	require.NoError(t, op.Close())

	srv := redistest.Start(t)
	for _, c := range clients {
		t.Run(c, func(t *testing.T) {
			op, err := Open(t.Context(), "redis://"+srv.Addr()+"/0", WithClient(c))
			require.NoError(t, err)
			defer op.Close()
			require.NotNil(t, op.Bus)
			require.Equal(t, c, op.Client)
			take(t, op.Store)
		})
	}
}
