package config

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/limiter"
)

// listsFile is a policy with exemptions and a deny list, on the backend
// given by the format arguments (URL, client), in YAML.
const listsFile = `
backend:
  url: %s
  client: %s
policies:
  api:
    limit: 2
    window: 1h
    exempt: ["ops", "10.0.0.0/8", "2001:db8::/32"]
    deny:
      - mallory
      - 10.9.0.0/16
  open:
    limit: 2
    window: 1h
`

// listsJSON is listsFile's api policy in JSON.
const listsJSON = `{"backend": {"url": %q, "client": %q}, "policies": {
  "api": {"limit": 2, "window": "1h", "exempt": ["ops", "10.0.0.0/8", "2001:db8::/32"], "deny": ["mallory", "10.9.0.0/16"]},
  "open": {"limit": 2, "window": "1h"}}}`

// TestListsFromFile: a policy's exempt and deny lists read from YAML and
// JSON admit and deny listed keys beyond the limit; on a real
// redis-server, with both clients, they write no key (no store call),
// while the control policy without lists counts the same keys in Redis
// and limits them. A reload swaps the lists with the limits.
func TestListsFromFile(t *testing.T) {
	ctx := context.Background()
	check := func(t *testing.T, url, client string, format Format, dbsize func() int) {
		text := fmt.Sprintf(listsFile, url, client)
		if format == JSON {
			text = fmt.Sprintf(listsJSON, url, client)
		}
		cfg, err := Parse([]byte(text), format)
		require.NoError(t, err)
		set, err := cfg.Build(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, set.Close()) })
		api, open := set.Limiter("api"), set.Limiter("open")
		denied := map[string]bool{"mallory": true, "10.9.1.1": true}
		for _, key := range []string{"ops", "10.1.2.3", "2001:db8::9", "mallory", "10.9.1.1"} {
			n, last := admitted(t, api, key, 4)
			if denied[key] {
				require.Zero(t, n, key)
				require.True(t, last.DenyListed, key)
			} else {
				require.Equal(t, 4, n, key)
				require.True(t, last.Exempt, key)
			}
		}
		if dbsize != nil {
			require.Zero(t, dbsize(), "listed keys wrote nothing to the store")
		}
		n, _ := admitted(t, open, "ops", 4)
		require.Equal(t, 2, n, "control: the policy without lists limits the key")
		if dbsize != nil {
			require.NotZero(t, dbsize(), "control: the policy without lists counts in the store")
		}

		// Reload: ops moves to the deny list; mallory is no longer listed.
		next, err := Parse([]byte(fmt.Sprintf(`
backend: {url: %q, client: %s}
policies:
  api: {limit: 2, window: 1h, deny: [ops]}
  open: {limit: 2, window: 1h}
`, url, client)), YAML)
		require.NoError(t, err)
		require.NoError(t, set.Reload(next))
		_, last := admitted(t, api, "ops", 1)
		require.True(t, last.DenyListed)
		n, last = admitted(t, api, "mallory", 3)
		require.Equal(t, 2, n, "mallory is limited, no longer denied")
		require.False(t, last.DenyListed)
	}
	for _, format := range []Format{YAML, JSON} {
		t.Run(fmt.Sprint("memory ", format), func(t *testing.T) {
			// The memory store cannot be looked into; its limits are.
			check(t, "memory://", GoRedis, format, nil)
		})
	}
	srv := redistest.Start(t)
	dbsize := func() int {
		s, err := srv.Do("DBSIZE")
		require.NoError(t, err)
		var n int
		_, err = fmt.Sscan(s, &n)
		require.NoError(t, err)
		return n
	}
	for _, client := range []string{GoRedis, Rueidis} {
		for _, format := range []Format{YAML, JSON} {
			t.Run(fmt.Sprint(client, " ", format), func(t *testing.T) {
				_, err := srv.Do("FLUSHALL")
				require.NoError(t, err)
				check(t, "redis://"+srv.Addr()+"/0", client, format, dbsize)
			})
		}
	}
}

// TestBadListEntriesInFile: every bad entry is reported, at its line.
func TestBadListEntriesInFile(t *testing.T) {
	_, err := Parse([]byte(`backend: {url: "memory://"}
policies:
  api:
    limit: 2
    window: 1h
    exempt:
      - ops
      - 10.0.0.1/8
    deny: ["", "2001:db8::/129"]
  web:
    limit: 2
    window: 1h
    exempt: ops
`), YAML)
	require.ErrorIs(t, err, limiter.ErrInvalidConfig)
	for _, want := range []string{
		`line 8: policies.api.exempt.1: exempt entry "10.0.0.1/8": has host bits set; write 10.0.0.0/8`,
		`line 9: policies.api.deny.0: deny entry "": empty`,
		`line 9: policies.api.deny.1: deny entry "2001:db8::/129": not a valid CIDR prefix`,
		`line 13: policies.web.exempt: "ops" is not a list`,
	} {
		require.ErrorContains(t, err, want)
	}
}
