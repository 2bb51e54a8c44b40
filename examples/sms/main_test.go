package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/internal/dev/exampletest"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
)

// TestSMS: the same decisions in memory and with the counts in a real
// redis-server, through either client and the fallback store.
func TestSMS(t *testing.T) {
	exampletest.EveryStore(t, openStore, checkOutput)
}

func checkOutput(t *testing.T, store backend.Store, where string) {
	t.Helper()
	var out strings.Builder
	require.NoError(t, run(&out, store, where))
	text := out.String()
	t.Log("\n" + text)
	for _, want := range []string{
		"t=10s      +44 7700 900123      refused: wait 20s before asking again",
		"t=30s      +447700900123        code sent to +447700900123",
		"t=31s      +44-7700-900-123     refused: wait 29s before asking again",
		"t=15m0s    +44 7700 900123      refused: 5 codes a day; next in 23h45m0s",
		"t=15m0s    +1 202 555 0143      code sent to +12025550143",
		`refused: not a phone number: "call me maybe"`,
		"t=24h0m0s  +44 7700 900123      code sent to +447700900123",
	} {
		require.Contains(t, text, want)
	}
	require.Equal(t, 5+1, strings.Count(text, "code sent to +447700900123"))
}

// TestSMSFailsClosed: with Redis gone after start, the fallback store
// refuses every code instead of sending an unlimited number. (A Redis that
// is down at start fails the store's opening check instead.)
func TestSMSFailsClosed(t *testing.T) {
	srv := redistest.Start(t)
	store, _, closeStore, err := openStore("redis://"+srv.Addr()+"/0", "go-redis")
	require.NoError(t, err)
	defer closeStore()
	srv.Kill()
	lim, err := limiter.New(store, codeLimit("test:"))
	require.NoError(t, err)
	s := &sender{lim: lim}
	for range 3 {
		msg, err := s.send(context.Background(), "+44 7700 900123")
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(msg, "refused: codes cannot be counted right now"), msg)
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"+44 7700 900123":    "+447700900123",
		" +1 (202) 555-0143": "+12025550143",
		"+33.6.12.34.56.78":  "+33612345678",
	} {
		got, err := normalize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got)
	}
	for _, in := range []string{"", "07700 900123", "+44 7700 900123 ext 5", "+1 2", "++447700900123", "+4477009001234567890"} {
		_, err := normalize(in)
		require.ErrorIs(t, err, errBadNumber, in)
	}
}
