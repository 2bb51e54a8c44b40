package config

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/testing/redistest"
)

// TestRedissToPlainServer: rediss:// pointed at a redis-server without
// TLS says so, with both clients, instead of ending in a bare deadline
// (before: "context deadline exceeded" / "i/o timeout" and nothing more).
func TestRedissToPlainServer(t *testing.T) {
	srv := redistest.Start(t)
	for _, client := range []string{GoRedis, Rueidis} {
		t.Run(client, func(t *testing.T) {
			cfg, err := Parse(fmt.Appendf(nil, "backend: {url: 'rediss://%s/0?dial_timeout=300ms', client: %s}\npolicies: {a: {limit: 1, window: 1s}}\n",
				srv.Addr(), client), YAML)
			require.NoError(t, err)
			set, err := cfg.Build(context.Background())
			if err == nil {
				defer set.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err = set.Limiter("a").Allow(ctx, "k")
			}
			require.Error(t, err)
			require.ErrorContains(t, err, "looks like TLS (rediss://) to a non-TLS server")
		})
	}
}

// TestRedissSentinelToPlainServers: with rediss+sentinel:// and rueidis
// the sentinels are dialled without TLS (as before: rueidis hands the
// dialer no TLS config for them) and the plain master is reported as
// such. (go-redis dials the sentinels with TLS too, and reports only "all
// sentinels specified in configuration are unreachable", dropping the
// dialer's error.)
func TestRedissSentinelToPlainServers(t *testing.T) {
	sn := redistest.StartSentinel(t)
	addrs := sn.SentinelAddrs()
	for _, client := range []string{Rueidis} {
		t.Run(client, func(t *testing.T) {
			u := "rediss+sentinel://" + addrs[0] + "?master_name=" + sn.MasterName + "&dial_timeout=300ms"
			cfg, err := Parse(fmt.Appendf(nil, "backend: {url: '%s', client: %s}\npolicies: {a: {limit: 1, window: 1s}}\n", u, client), YAML)
			require.NoError(t, err)
			set, err := cfg.Build(context.Background())
			if err == nil {
				defer set.Close()
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_, err = set.Limiter("a").Allow(ctx, "k")
			}
			require.Error(t, err)
			require.ErrorContains(t, err, "non-TLS server")
		})
	}
}

// TestProbeNeedsAPlainRedis: when nothing answers plain Redis (the
// address refuses), the error does not claim a non-TLS server.
func TestProbeNeedsAPlainRedis(t *testing.T) {
	require.False(t, probe("tcp", refusedAddr(t)))
	srv := redistest.Start(t)
	require.True(t, probe("tcp", srv.Addr()))
}

// TestURLOptionsRefused: both clients refuse an option they do not know,
// naming it (rueidis' own parser ignores it), and rueidis still takes its
// own options.
func TestURLOptionsRefused(t *testing.T) {
	for client, want := range map[string]string{
		GoRedis: "go-redis: redis: unexpected option: pool_sise",
		Rueidis: `rueidis has no URL option "pool_sise"`,
	} {
		for _, u := range []string{"redis://127.0.0.1:6379/0?pool_sise=3", "redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001&pool_sise=3",
			"redis+sentinel://127.0.0.1:26379?master_name=m&pool_sise=3"} {
			_, err := Parse(fmt.Appendf(nil, "backend: {url: '%s', client: %s}\npolicies: {a: {limit: 1, window: 1s}}\n", u, client), YAML)
			require.ErrorContains(t, err, want, u)
		}
	}
	_, err := Parse([]byte("backend: {url: 'redis://127.0.0.1:6379/0?dial_timout=1s', client: rueidis}\npolicies: {a: {limit: 1, window: 1s}}\n"), YAML)
	require.ErrorContains(t, err, `rueidis has no URL option "dial_timout" (did you mean "dial_timeout"?)`)
	_, err = Parse([]byte("backend: {url: 'redis://127.0.0.1:6379/0?dial_timeout=1s&client_name=x&protocol=3&max_retries=0', client: rueidis}\n"+
		"policies: {a: {limit: 1, window: 1s}}\n"), YAML)
	require.NoError(t, err)
}
