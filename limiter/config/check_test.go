package config

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/dev/redistest"
)

// TestBuildChecksTheStore: Build fails, with the reason, when the store
// cannot work, with both clients: rediss:// to a server without TLS, a
// wrong password, an unknown sentinel master. Before, go-redis built the
// Set and failed the first decision (a bare deadline for rediss://).
func TestBuildChecksTheStore(t *testing.T) {
	srv := redistest.Start(t)
	locked := redistest.Start(t)
	_, err := locked.Do("CONFIG", "SET", "requirepass", "right-pw")
	require.NoError(t, err)
	sn := redistest.StartSentinel(t)
	for _, client := range []string{GoRedis, Rueidis} {
		for url, want := range map[string]string{
			"rediss://" + srv.Addr() + "/0?dial_timeout=300ms":                                   "looks like TLS (rediss://) to a non-TLS server",
			"redis://:wrong-pw@" + locked.Addr() + "/0":                                          "the server refused the user name and password",
			"redis+sentinel://" + sn.SentinelAddrs()[0] + "?master_name=nope&dial_timeout=300ms": `no sentinel monitors a master named "nope"`,
		} {
			t.Run(client+"/"+want, func(t *testing.T) {
				cfg, err := Parse(fmt.Appendf(nil, "backend: {url: '%s', client: %s}\npolicies: {a: {limit: 1, window: 1s}}\n", url, client), YAML)
				require.NoError(t, err)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				set, err := cfg.Build(ctx)
				if err == nil {
					_ = set.Close()
				}
				require.Error(t, err, "Build must fail, not the first decision")
				require.ErrorContains(t, err, "backend.url: the check of the store failed: ")
				require.ErrorContains(t, err, want)
				require.NotContains(t, err.Error(), "wrong-pw")
			})
		}
	}
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
