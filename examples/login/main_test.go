package main

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/dev/exampletest"
)

// TestLogin: the same story in memory and with the counts in a real
// redis-server, through either client.
func TestLogin(t *testing.T) {
	exampletest.EveryStore(t, openStore, checkOutput)
}

func checkOutput(t *testing.T, store backend.Store, where string) {
	t.Helper()
	var out strings.Builder
	require.NoError(t, run(&out, store, where))
	text := out.String()
	t.Log("\n" + text)
	for _, want := range []string{
		"t=10s    alice  from 192.0.2.10     welcome; the account's count is reset",
		"t=15s    alice  from 192.0.2.10     wrong password (4 attempts left)",
		"t=1m4s   bob    from 203.0.113.7    wrong password (no attempts left)",
		"t=1m5s   bob    from 203.0.113.7    blocked: too many login attempts for this account; retry in 14m55s",
		"t=2m0s   bob    from 192.0.2.44     blocked: too many login attempts for this account; retry in 14m0s",
		"t=17m0s  bob    from 192.0.2.44     welcome",
		"20 passwords checked, 5 attempts refused by the per-address limit",
		"the last one: blocked: too many login attempts for this address; retry in 1h0m0s",
	} {
		require.Contains(t, text, want)
	}
	require.Equal(t, 5, strings.Count(text, "bob    from 203.0.113.7    wrong password"))
	require.Equal(t, 2, strings.Count(text, "bob    from 203.0.113.7    blocked"))
}

// TestConcurrentGuesses: 50 guesses at once get exactly 5 password checks,
// because each attempt is counted before its check in one atomic step.
func TestConcurrentGuesses(t *testing.T) {
	store, _, closeStore, err := openStore("", "")
	require.NoError(t, err)
	defer closeStore()
	g, err := newLoginGuard(store, "test:", clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))
	require.NoError(t, err)
	var checked, blocked atomic.Int64
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			msg, err := g.login(context.Background(), "bob", "203.0.113."+string(rune('0'+i%10)), "guess")
			if err != nil {
				t.Error(err)
				return
			}
			if strings.HasPrefix(msg, "blocked:") {
				blocked.Add(1)
			} else {
				checked.Add(1)
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(5), checked.Load())
	require.Equal(t, int64(45), blocked.Load())
}

func TestBadStore(t *testing.T) {
	_, _, _, err := openStore("http://127.0.0.1/", "go-redis")
	require.Error(t, err)
}
