package main

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/rediswire"
	"github.com/limitkit/limitkit/limiter"
)

const prefix = "limitkit:test:"

// fill writes keys through the real stores: 7 sliding-log keys (go-redis),
// 4 sliding-counter keys (rueidis) and 3 fixed-window keys each with a
// fixed-window guard (go-redis, native commands: no script, and a key per
// window, found with KEYS), and returns every key written, with how many
// calls each script got.
func fill(t *testing.T, srv *redistest.Server) ([]string, map[string]int) {
	t.Helper()
	ctx := context.Background()
	gc := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	t.Cleanup(func() { _ = gc.Close() })
	gs, err := goredisstore.New(gc)
	require.NoError(t, err)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr()}})
	require.NoError(t, err)
	t.Cleanup(rc.Close)
	// Each Take alone, in its algorithm's own script.
	alone, err := rueidisstore.New(rc, rueidisstore.WithBatching(1))
	require.NoError(t, err)

	var keys []string
	calls := map[string]int{}
	use := func(store backend.Store, cfg limiter.Config, script string, ids int, suffixes ...string) {
		lim, err := limiter.New(store, cfg)
		require.NoError(t, err)
		for i := range ids {
			id := fmt.Sprint("user", i)
			d, err := lim.Allow(ctx, id)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			if script != "" {
				calls[script]++
			}
			for _, s := range suffixes {
				k := strings.Replace(s, "ID", id, 1)
				if strings.HasSuffix(k, ":fw") {
					found, err := srv.Do("KEYS", k+":*")
					require.NoError(t, err)
					k = strings.TrimSpace(found)
					require.NotEmpty(t, k, "the fixed window's key of %s", id)
				}
				keys = append(keys, k)
			}
		}
	}
	use(gs, limiter.Config{Algorithm: algorithms.SlidingLog, Limit: 10, Window: time.Minute, Prefix: prefix + "login:"},
		batchScript, 7, prefix+"login:{ID}:sl")
	use(alone, limiter.Config{Algorithm: algorithms.SlidingCounter, Limit: 100, Window: time.Minute, Prefix: prefix + "api:"},
		"sliding_counter", 4, prefix+"api:{ID}:sc")
	use(gs, limiter.Config{Algorithm: algorithms.FixedWindow, Limit: 3, Window: time.Minute, Prefix: prefix + "pay:",
		Guard: &limiter.Guard{Limit: 5, Window: time.Hour}},
		"", 3, prefix+"pay:{ID}:fw", prefix+"pay:guard:{ID}:fw")
	return keys, calls
}

func memoryUsage(t *testing.T, srv *redistest.Server, keys []string) int64 {
	t.Helper()
	var total int64
	for _, k := range keys {
		v, err := srv.Do("MEMORY", "USAGE", k, "SAMPLES", "0")
		require.NoError(t, err)
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, v)
		total += n
	}
	return total
}

func TestInspect(t *testing.T) {
	srv := redistest.Start(t)
	// Log every command, so that every script call is in SLOWLOG.
	for _, args := range [][]string{
		{"CONFIG", "SET", "slowlog-log-slower-than", "0"},
		{"CONFIG", "SET", "slowlog-max-len", "10000"},
		{"SLOWLOG", "RESET"},
	} {
		_, err := srv.Do(args...)
		require.NoError(t, err)
	}
	keys, calls := fill(t, srv)
	// A key written by hand, without a TTL, and keys outside the prefix.
	for _, args := range [][]string{
		{"SET", prefix + "manual", "1"},
		{"SET", "limitkit:other:{x}:sl", "1"},
		{"SET", "unrelated", "1"},
	} {
		_, err := srv.Do(args...)
		require.NoError(t, err)
	}
	keys = append(keys, prefix+"manual")
	wantBytes := memoryUsage(t, srv, keys)

	client := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer client.Close()
	ctx := context.Background()
	o := options{prefix: prefix, count: 5, sample: 1000, maxKeys: 1000, slowlog: 10000}
	r, err := inspect(ctx, client, o)
	require.NoError(t, err)

	require.Equal(t, int64(len(keys)), r.Keys)
	require.Equal(t, int64(7+4+3*2+1), r.Keys)
	require.False(t, r.Truncated)
	require.Equal(t, map[string]int64{":sl": 7, ":sc": 4, ":fw": 6, other: 1}, r.BySuffix)
	require.Equal(t, int64(1), r.NoTTL)
	require.Equal(t, []string{prefix + "manual"}, r.NoTTLKeys)
	require.Equal(t, r.Keys, r.Sampled, "every key measured")
	require.Equal(t, wantBytes, r.SampledBytes)
	require.Equal(t, wantBytes, r.EstimatedBytes)

	// Each script's first call is EVALSHA, refused with NOSCRIPT, then
	// EVAL with the script's text (shortened by SLOWLOG): one entry more
	// than calls, and both forms are recognised.
	var want []SlowScript
	for _, name := range []string{batchScript, "sliding_counter"} {
		want = append(want, SlowScript{Script: name, Entries: calls[name] + 1})
	}
	slow := slices.Clone(r.Slow)
	for i := range slow {
		require.Positive(t, slow[i].Slowest)
		slow[i].Slowest = 0
	}
	require.Equal(t, want, slow)

	require.Len(t, r.Nodes, 1)
	require.Equal(t, srv.Addr(), r.Nodes[0].Addr)
	require.Equal(t, "noeviction", r.Nodes[0].MaxmemoryPolicy)
	require.Zero(t, r.Nodes[0].Maxmemory)
	require.Empty(t, r.Nodes[0].Warning)

	var out strings.Builder
	r.print(&out)
	text := out.String()
	t.Log("\n" + text)
	for _, line := range []string{
		fmt.Sprintf("limitkit keys under %q on %s", prefix, srv.Addr()),
		"keys: 18\n",
		"  sliding_log      :sl   7\n",
		"  sliding_counter  :sc   4\n",
		"  fixed_window     :fw   6\n",
		"  other                  1\n",
		fmt.Sprintf("  %d bytes in 18 sampled keys", wantBytes),
		fmt.Sprintf("  about %d bytes for all 18 keys", wantBytes),
		"keys without a TTL: 1\n",
		fmt.Sprintf("    %q\n", prefix+"manual"),
		fmt.Sprintf("SLOWLOG: %d limitkit script entries", calls[batchScript]+calls["sliding_counter"]+2),
		fmt.Sprintf("  batch            %d entries", calls[batchScript]+1),
		fmt.Sprintf("  %s: maxmemory-policy noeviction, maxmemory 0\n", srv.Addr()),
	} {
		require.Contains(t, text, line)
	}
	require.NotContains(t, text, "    WARNING")

	t.Run("sample", func(t *testing.T) {
		o := o
		o.sample = 5
		r, err := inspect(ctx, client, o)
		require.NoError(t, err)
		require.Equal(t, int64(5), r.Sampled)
		require.Equal(t, r.SampledBytes*18/5, r.EstimatedBytes)
	})
	t.Run("max keys", func(t *testing.T) {
		o := o
		o.maxKeys = 7
		r, err := inspect(ctx, client, o)
		require.NoError(t, err)
		require.True(t, r.Truncated)
		require.Equal(t, int64(7), r.Keys)
		var out strings.Builder
		r.print(&out)
		require.Contains(t, out.String(), "keys: 7 (scanning stopped at -max-keys; there are more)")
	})
	t.Run("glob characters in the prefix", func(t *testing.T) {
		o := o
		o.prefix = "limitkit:*"
		r, err := inspect(ctx, client, o)
		require.NoError(t, err)
		require.Zero(t, r.Keys, "the * is a character of the prefix, not a pattern")
	})
	t.Run("eviction policies", func(t *testing.T) {
		for _, tc := range []struct {
			policy, maxmemory, want string
		}{
			{"allkeys-lru", "0", "Redis may evict limiter keys"},
			{"volatile-ttl", "0", "every limiter key has one"},
			{"noeviction", "104857600", "Redis refuses writes (OOM)"},
		} {
			_, err := srv.Do("CONFIG", "SET", "maxmemory-policy", tc.policy, "maxmemory", tc.maxmemory)
			require.NoError(t, err)
			r, err := inspect(ctx, client, o)
			require.NoError(t, err)
			require.Equal(t, tc.policy, r.Nodes[0].MaxmemoryPolicy)
			require.Contains(t, r.Nodes[0].Warning, tc.want)
			var out strings.Builder
			r.print(&out)
			require.Contains(t, out.String(), "    WARNING: ")
			require.Contains(t, out.String(), tc.want)
		}
		_, err := srv.Do("CONFIG", "SET", "maxmemory-policy", "noeviction", "maxmemory", "0")
		require.NoError(t, err)
	})
}

// TestInspectCluster: on a cluster every master is scanned.
func TestInspectCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3, 0)
	addrs := cluster.Addrs()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	ctx := context.Background()
	store, err := goredisstore.New(cc)
	require.NoError(t, err)
	lim, err := limiter.New(store, limiter.Config{Limit: 5, Window: time.Minute, Prefix: prefix})
	require.NoError(t, err)
	masters := map[string]bool{}
	for i := range 30 {
		id := fmt.Sprint("user", i)
		_, err := lim.Allow(ctx, id)
		require.NoError(t, err)
		masters[cluster.MasterOf(redistest.KeySlot(prefix+"{"+id+"}:sl")).Addr()] = true
	}
	require.Len(t, masters, 3, "the keys are spread over the masters")
	r, err := inspect(ctx, cc, options{prefix: prefix, count: 10, sample: 10, maxKeys: 1000, slowlog: 10})
	require.NoError(t, err)
	require.Equal(t, int64(30), r.Keys)
	require.Equal(t, int64(30), r.BySuffix[":sl"])
	require.Len(t, r.Nodes, 3)
	require.Equal(t, int64(10), r.Sampled)
}

func TestMatchScript(t *testing.T) {
	known := scripts()
	body, err := rediswire.Script(algorithms.SlidingCounter)
	require.NoError(t, err)
	shortened := body[:128] + fmt.Sprintf("... (%d more bytes)", len(body)-128)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"EVALSHA", known[0].sha, "1", "k"}, known[0].name},
		{[]string{"evalsha_ro", strings.ToUpper(known[1].sha)}, known[1].name},
		{[]string{"EVAL", shortened, "1"}, "sliding_counter"},
		{[]string{"EVAL", body}, "sliding_counter"},
		{[]string{"EVAL", body[:128] + "... (3 more bytes)"}, ""},
		{[]string{"EVALSHA", strings.Repeat("0", 40)}, ""},
		{[]string{"GET", "k"}, ""},
		{[]string{"EVAL"}, ""},
		{nil, ""},
	} {
		require.Equal(t, tc.want, matchScript(tc.args, known), "%.40q", tc.args)
	}
}

func TestBadOptions(t *testing.T) {
	for _, o := range []options{
		{prefix: "x", count: 0, sample: 1, maxKeys: 1},
		{prefix: "x", count: 1, sample: -1, maxKeys: 1},
		{prefix: "x", count: 1, sample: 1, maxKeys: 0},
		{prefix: "x", count: 1, sample: 1, maxKeys: 1, slowlog: -1},
	} {
		_, err := inspect(context.Background(), redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}), o)
		require.Error(t, err)
	}
}

// TestErrorsHideThePassword: whatever is wrong with the -redis URL, or
// with the server it names, nothing inspect prints holds a piece of the
// password. Before the fix, the first URL printed
// "invalid URL path: /Sup3rS3cretPW@...".
func TestErrorsHideThePassword(t *testing.T) {
	srv := redistest.Start(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := l.Addr().String()
	require.NoError(t, l.Close())
	for _, u := range []string{
		"redis://:p@ss/Sup3rS3cretPW@H/0",
		"redis://:Sup3r?S3cretPW@H/0",
		"redis://:Sup3r#S3cretPW@H/0",
		"redis://:Sup3r%zzS3cretPW@H/0",
		"redis://Sup3r:S3cretPW@H/x",
		"redis://:Sup3rS3cretPW@H/0?bogus=1",
		"redis:/:Sup3rS3cretPW@H/0",
		"redis+sentinel://:Sup3r/S3cretPW@H?master_name=m",
		"redis+cluster://:Sup3r/S3cretPW@H?addr=H",
		"redis://:Sup3rS3cretPW@" + refused + "/0",    // well formed, nobody listening
		"redis://Sup3r:S3cretPW@" + srv.Addr() + "/0", // well formed, wrong credentials
	} {
		u = strings.ReplaceAll(u, "@H", "@127.0.0.1:6379")
		u = strings.ReplaceAll(u, "=H", "=127.0.0.1:6380")
		var stdout, stderr strings.Builder
		code := run([]string{"-redis", u, "-timeout", "5s"}, &stdout, &stderr)
		require.Equal(t, 1, code, "%s: %s", u, stderr.String())
		require.NotEmpty(t, stderr.String(), u)
		for _, s := range []string{"Sup3r", "S3cretPW"} {
			require.NotContains(t, stderr.String()+stdout.String(), s, u)
		}
	}
}
