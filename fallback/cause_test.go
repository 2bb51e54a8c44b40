package fallback_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestOpeningLogsItsCause: a real redis-server that requires a password,
// a go-redis client with the wrong one: the breaker opens, and its log
// line and the hook's StateChange carry the server's refusal (WRONGPASS,
// or NOAUTH), so the operator sees why.
func TestOpeningLogsItsCause(t *testing.T) {
	srv := redistest.Start(t)
	// Set after start: redistest's readiness probe does not authenticate.
	_, err := srv.Do("CONFIG", "SET", "requirepass", "right-password")
	require.NoError(t, err)
	t.Cleanup(func() { // let redistest's own probes in again
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "right-password"})
		_ = admin.ConfigSet(context.Background(), "requirepass", "").Err()
		_ = admin.Close()
	})
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "wrong-password", MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	gs, err := goredisstore.New(c)
	require.NoError(t, err)
	var logs syncBuffer
	var mu sync.Mutex
	var changes []backend.StateChange
	s := newStore(t, gs, fallback.WithFailureThreshold(2), fallback.WithOpenTimeout(time.Hour), fallback.WithTimeout(2*time.Second),
		fallback.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		fallback.WithStateHook(func(c backend.StateChange) { mu.Lock(); changes = append(changes, c); mu.Unlock() }))
	for range 3 {
		res, err := s.Take(t.Context(), req("a"))
		require.NoError(t, err)
		require.True(t, res.Degraded)
	}
	require.Equal(t, backend.BreakerOpen, s.State())
	line := logs.String()
	t.Log(strings.TrimSpace(line))
	require.Contains(t, line, "to=open")
	require.Regexp(t, `cause=.*(WRONGPASS|NOAUTH)`, line)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, changes, 1)
	require.Error(t, changes[0].Cause)
	require.Regexp(t, `WRONGPASS|NOAUTH`, changes[0].Cause.Error())
}
