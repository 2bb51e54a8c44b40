package redistest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/stretchr/testify/require"
)

// fakeTB records Skipf and Fatalf instead of ending the real test, so that
// the decision Require makes can be asserted.
type fakeTB struct {
	testing.TB

	mu      sync.Mutex
	skipped bool
	failed  bool
	msg     string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skipf(format string, args ...any) {
	f.mu.Lock()
	f.skipped, f.msg = true, fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	f.mu.Unlock()
	runtime.Goexit()
}

// runFake runs fn with a fakeTB on its own goroutine (Skipf and Fatalf end
// it) and returns what happened.
func runFake(t *testing.T, fn func(tb testing.TB)) (skipped, failed bool, msg string) {
	f := &fakeTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn(f)
	}()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.skipped, f.failed, f.msg
}

func TestRequire(t *testing.T) {
	self, err := os.Executable()
	require.NoError(t, err)
	emptyDir := t.TempDir()

	tests := []struct {
		name        string
		requireEnv  string
		path        string // PATH; "" keeps the current one
		run         func(tb testing.TB)
		wantSkip    bool
		wantFail    bool
		wantMessage []string
	}{
		{
			name: "present binary passes",
			run:  func(tb testing.TB) { redistest.Require(tb, self) },
		},
		{
			name: "present binary passes when required", requireEnv: "1",
			run: func(tb testing.TB) { redistest.Require(tb, self) },
		},
		{
			name:        "missing binary skips",
			run:         func(tb testing.TB) { redistest.Require(tb, "redistest-no-such-binary") },
			wantSkip:    true,
			wantMessage: []string{"redistest-no-such-binary", "not found on PATH", "skipping", redistest.RequireEnv + "=1"},
		},
		{
			name: "missing binary fails when required", requireEnv: "1",
			run:         func(tb testing.TB) { redistest.Require(tb, "redistest-no-such-binary") },
			wantFail:    true,
			wantMessage: []string{"redistest-no-such-binary", "not found on PATH", "failing"},
		},
		{
			name: "defaults without redis on PATH skip", path: emptyDir,
			run:         func(tb testing.TB) { redistest.Require(tb) },
			wantSkip:    true,
			wantMessage: []string{"redis-server, redis-cli", "apt-get install"},
		},
		{
			name: "defaults without redis on PATH fail when required", path: emptyDir, requireEnv: "1",
			run:         func(tb testing.TB) { redistest.Require(tb) },
			wantFail:    true,
			wantMessage: []string{"redis-server, redis-cli"},
		},
		{
			name: "Start without redis-server skips", path: emptyDir,
			run:         func(tb testing.TB) { redistest.Start(tb) },
			wantSkip:    true,
			wantMessage: []string{"redis-server not found"},
		},
		{
			name: "StartCluster without redis fails when required", path: emptyDir, requireEnv: "1",
			run:         func(tb testing.TB) { redistest.StartCluster(tb, 3, 0) },
			wantFail:    true,
			wantMessage: []string{"redis-server, redis-cli not found"},
		},
		{
			name: "StartSentinel without redis-server skips", path: emptyDir,
			run:         func(tb testing.TB) { redistest.StartSentinel(tb) },
			wantSkip:    true,
			wantMessage: []string{"redis-server not found"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(redistest.RequireEnv, tc.requireEnv)
			if tc.path != "" {
				t.Setenv("PATH", tc.path)
			}
			skipped, failed, msg := runFake(t, tc.run)
			require.Equal(t, tc.wantSkip, skipped, "skipped; message %q", msg)
			require.Equal(t, tc.wantFail, failed, "failed; message %q", msg)
			for _, want := range tc.wantMessage {
				require.Contains(t, msg, want)
			}
		})
	}
}

func TestServerDo(t *testing.T) {
	srv := redistest.Start(t, redistest.WithArgs("--maxmemory", "10mb"))
	require.Equal(t, "127.0.0.1:"+strconv.Itoa(srv.Port()), srv.Addr())
	require.NotZero(t, srv.PID())

	do := func(args ...string) string {
		t.Helper()
		reply, err := srv.Do(args...)
		require.NoError(t, err, "%v", args)
		return reply
	}
	require.Equal(t, "PONG", do("PING"))
	require.Equal(t, "OK", do("SET", "k", "v a\r\nlue"))
	require.Equal(t, "v a\r\nlue", do("GET", "k"))
	require.Equal(t, "1", do("INCR", "n"))
	require.Equal(t, "3", do("RPUSH", "l", "a", "b", ""))
	require.Equal(t, "a\nb\n", do("LRANGE", "l", "0", "-1"))

	v, err := srv.DoValue(context.Background(), "LRANGE", "l", "0", "-1")
	require.NoError(t, err)
	require.Equal(t, []any{"a", "b", ""}, v)
	v, err = srv.DoValue(context.Background(), "INCRBY", "n", "41")
	require.NoError(t, err)
	require.Equal(t, int64(42), v)

	_, err = srv.Do("GET", "missing")
	require.ErrorIs(t, err, redistest.ErrNil)
	v, err = srv.DoValue(context.Background(), "GET", "missing")
	require.NoError(t, err)
	require.Nil(t, v)

	_, err = srv.Do("NOSUCHCOMMAND", "x")
	var replyErr redistest.ReplyError
	require.ErrorAs(t, err, &replyErr)
	require.Contains(t, string(replyErr), "unknown command")

	// The package's settings and the extra arguments.
	require.Equal(t, "maxmemory\n10485760", do("CONFIG", "GET", "maxmemory"))
	require.Equal(t, "save\n", do("CONFIG", "GET", "save"))
	require.Equal(t, "appendonly\nno", do("CONFIG", "GET", "appendonly"))
	require.Equal(t, "bind\n127.0.0.1", do("CONFIG", "GET", "bind"))

	major, err := strconv.Atoi(strings.SplitN(infoField(t, srv, "server", "redis_version"), ".", 2)[0])
	require.NoError(t, err)
	if major >= 7 {
		require.Equal(t, "OK", do("DEBUG", "SLEEP", "0"), "DEBUG is enabled on Redis 7+")
	}
}

func TestServerKillRestart(t *testing.T) {
	srv := redistest.Start(t)
	port, pid := srv.Port(), srv.PID()
	_, err := srv.Do("SET", "k", "v")
	require.NoError(t, err)

	srv.Kill()
	require.Zero(t, srv.PID())
	_, err = srv.Do("PING")
	require.Error(t, err, "a killed server refuses connections")
	srv.Kill() // killing a dead server does nothing

	srv.Restart()
	require.Equal(t, port, srv.Port())
	require.NotZero(t, srv.PID())
	require.NotEqual(t, pid, srv.PID())
	pong, err := srv.Do("PING")
	require.NoError(t, err)
	require.Equal(t, "PONG", pong)
	_, err = srv.Do("GET", "k")
	require.ErrorIs(t, err, redistest.ErrNil, "persistence is off: the data set starts empty")

	srv.Stop()
	require.Zero(t, srv.PID())
	_, err = srv.Do("PING")
	require.Error(t, err)
	srv.Stop() // stopping a stopped server does nothing

	srv.Restart()
	require.Equal(t, port, srv.Port())
	pong, err = srv.Do("PING")
	require.NoError(t, err)
	require.Equal(t, "PONG", pong)

	// Restart of a running server kills it first.
	pid = srv.PID()
	srv.Restart()
	require.NotEqual(t, pid, srv.PID())
	pong, err = srv.Do("PING")
	require.NoError(t, err)
	require.Equal(t, "PONG", pong)
}

func TestServerRestartWaitsForPort(t *testing.T) {
	srv := redistest.Start(t)
	port := srv.Port()
	srv.Kill()

	// Another program holds the port for a moment: Restart retries.
	l, err := net.Listen("tcp", srv.Addr())
	require.NoError(t, err)
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(300 * time.Millisecond)
		_ = l.Close()
	}()
	srv.Restart()
	<-released
	require.Equal(t, port, srv.Port())
	pong, err := srv.Do("PING")
	require.NoError(t, err)
	require.Equal(t, "PONG", pong)
}

func TestServerPauseResume(t *testing.T) {
	srv := redistest.Start(t)
	_, err := srv.Do("SET", "k", "v")
	require.NoError(t, err)

	srv.Pause()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = srv.DoContext(ctx, "GET", "k")
	require.ErrorIs(t, err, context.DeadlineExceeded, "a paused server does not answer")

	srv.Resume()
	got, err := srv.Do("GET", "k")
	require.NoError(t, err)
	require.Equal(t, "v", got, "a resumed server kept its data")

	// A paused server can still be stopped.
	srv.Pause()
	srv.Stop()
	require.Zero(t, srv.PID())
}

func TestServerCleanupKillsProcesses(t *testing.T) {
	redistest.Require(t, "redis-server") // a skipped subtest would leave nothing to check
	var pids []int
	t.Run("owner", func(t *testing.T) {
		running := redistest.Start(t)
		paused := redistest.Start(t)
		paused.Pause()
		pids = []int{running.PID(), paused.PID()}
	})
	require.Len(t, pids, 2)
	for _, pid := range pids {
		require.NotZero(t, pid)
		p, err := os.FindProcess(pid)
		if err != nil {
			continue // already gone
		}
		require.Error(t, p.Signal(syscall.Signal(0)), "process %d outlived its test", pid)
	}
}

func TestKeySlot(t *testing.T) {
	require.Equal(t, 12182, redistest.KeySlot("foo"))
	require.Equal(t, redistest.KeySlot("user1000"), redistest.KeySlot("{user1000}.following"))
	require.Equal(t, redistest.KeySlot("bar"), redistest.KeySlot("foo{bar}{zap}"))
	require.NotEqual(t, redistest.KeySlot("bar"), redistest.KeySlot("foo{}{bar}"), "an empty tag hashes the whole key")
}

func TestClusterThreeMasters(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 0)
	require.Len(t, c.Masters, 3)
	require.Empty(t, c.Replicas)
	require.Len(t, c.Addrs(), 3)

	for _, n := range c.Nodes() {
		require.Equal(t, "ok", clusterInfoField(t, n, "cluster_state"), n.Addr())
		require.Equal(t, "3", clusterInfoField(t, n, "cluster_known_nodes"), n.Addr())
		ranges := clusterSlots(t, n)
		require.Equal(t, redistest.NumSlots, coveredSlots(t, ranges), "CLUSTER SLOTS of %s", n.Addr())
		for _, r := range ranges {
			require.Len(t, r, 3, "no replicas: start, end, master")
		}
	}
	require.Same(t, c.Masters[0], c.MasterOf(0))
	require.Same(t, c.Masters[2], c.MasterOf(redistest.NumSlots-1))

	// KeySlot agrees with the server, hash tags included.
	for _, key := range []string{"foo", "bar", "", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "a{b}c{d}", "limitkit:{tenant}:fw"} {
		got, err := c.Masters[0].Do("CLUSTER", "KEYSLOT", key)
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(redistest.KeySlot(key)), got, "key %q", key)
	}

	// The master of a key's slot accepts it; another master redirects.
	slot := redistest.KeySlot("foo")
	owner := c.MasterOf(slot)
	reply, err := owner.Do("SET", "foo", "1")
	require.NoError(t, err)
	require.Equal(t, "OK", reply)
	other := c.Masters[(slices.Index(c.Masters, owner)+1)%len(c.Masters)]
	_, err = other.Do("SET", "foo", "1")
	var moved redistest.ReplyError
	require.ErrorAs(t, err, &moved)
	require.Equal(t, fmt.Sprintf("MOVED %d %s", slot, owner.Addr()), string(moved))
}

func TestClusterWithReplicasFailover(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, 3, 1)
	require.Len(t, c.Masters, 3)
	require.Len(t, c.Replicas, 3)
	require.Len(t, c.Addrs(), 6)

	masterPorts := map[string]*redistest.Server{}
	for _, m := range c.Masters {
		require.Equal(t, "master", infoField(t, m, "replication", "role"))
		masterPorts[strconv.Itoa(m.Port())] = m
	}
	replicaOf := map[*redistest.Server]*redistest.Server{} // master -> its replica
	for i, r := range c.Replicas {
		require.Equal(t, "slave", infoField(t, r, "replication", "role"))
		require.Equal(t, "up", infoField(t, r, "replication", "master_link_status"))
		m := masterPorts[infoField(t, r, "replication", "master_port")]
		require.NotNil(t, m, "replica %s replicates a master of the cluster", r.Addr())
		require.NotContains(t, replicaOf, m, "one replica per master")
		require.Same(t, c.Masters[i], m, "Replicas are in the order of their masters")
		replicaOf[m] = r
	}
	for _, n := range c.Nodes() {
		require.Equal(t, "ok", clusterInfoField(t, n, "cluster_state"), n.Addr())
		require.Equal(t, "6", clusterInfoField(t, n, "cluster_known_nodes"), n.Addr())
		ranges := clusterSlots(t, n)
		require.Equal(t, redistest.NumSlots, coveredSlots(t, ranges), "CLUSTER SLOTS of %s", n.Addr())
		for _, r := range ranges {
			require.Len(t, r, 4, "start, end, master, one replica")
		}
	}

	// Kill the master of slot 0: its replica takes over.
	old := c.MasterOf(0)
	promoted := replicaOf[old]
	old.Kill()
	c.WaitOK()
	require.Same(t, promoted, c.MasterOf(0))
	require.Equal(t, "master", infoField(t, promoted, "replication", "role"))

	// The old master comes back, on the same port, as a replica.
	old.Restart()
	c.WaitOK()
	require.Same(t, promoted, c.MasterOf(0))
	require.Eventually(t, func() bool {
		info, err := old.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "role:slave") &&
			strings.Contains(info, "master_port:"+strconv.Itoa(promoted.Port()))
	}, 30*time.Second, 50*time.Millisecond, "restarted master %s rejoins as a replica of %s", old.Addr(), promoted.Addr())
}

func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := redistest.StartSentinel(t)
	require.Equal(t, redistest.SentinelMasterName, s.MasterName)
	require.Len(t, s.Sentinels, 3)
	require.Len(t, s.SentinelAddrs(), 3)
	require.Equal(t, "slave", infoField(t, s.Replica, "replication", "role"))
	require.Equal(t, strconv.Itoa(s.Master.Port()), infoField(t, s.Replica, "replication", "master_port"))

	cur, err := s.CurrentMaster()
	require.NoError(t, err)
	require.Equal(t, s.Master.Addr(), cur)
	for _, sn := range s.Sentinels {
		require.Contains(t, sn.Addr(), "127.0.0.1:")
		info, err := sn.Do("INFO", "sentinel")
		require.NoError(t, err)
		require.Contains(t, info, "sentinel_masters:1")
		require.Contains(t, info, "status=ok,address="+s.Master.Addr()+",slaves=1,sentinels=3")
	}

	s.Master.Kill()
	require.Eventually(t, func() bool {
		cur, err := s.CurrentMaster()
		return err == nil && cur == s.Replica.Addr()
	}, 30*time.Second, 50*time.Millisecond, "sentinels promote the replica")
	require.Eventually(t, func() bool {
		info, err := s.Replica.Do("INFO", "replication")
		return err == nil && strings.Contains(info, "role:master")
	}, 10*time.Second, 50*time.Millisecond, "the promoted replica is a master")
}

// infoField returns one field of INFO <section>.
func infoField(t *testing.T, srv *redistest.Server, section, field string) string {
	t.Helper()
	info, err := srv.Do("INFO", section)
	require.NoError(t, err)
	return lineField(t, info, field)
}

func clusterInfoField(t *testing.T, srv *redistest.Server, field string) string {
	t.Helper()
	info, err := srv.Do("CLUSTER", "INFO")
	require.NoError(t, err)
	return lineField(t, info, field)
}

func lineField(t *testing.T, text, field string) string {
	t.Helper()
	for line := range strings.SplitSeq(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	t.Fatalf("no %s in %q", field, text)
	return ""
}

// clusterSlots returns the entries of CLUSTER SLOTS.
func clusterSlots(t *testing.T, srv *redistest.Server) [][]any {
	t.Helper()
	v, err := srv.DoValue(context.Background(), "CLUSTER", "SLOTS")
	require.NoError(t, err)
	entries, ok := v.([]any)
	require.True(t, ok, "CLUSTER SLOTS replied %T", v)
	ranges := make([][]any, len(entries))
	for i, e := range entries {
		ranges[i], ok = e.([]any)
		require.True(t, ok, "entry %v", e)
	}
	return ranges
}

// coveredSlots checks that the ranges do not overlap and returns how many
// slots they cover.
func coveredSlots(t *testing.T, ranges [][]any) int {
	t.Helper()
	var seen [redistest.NumSlots]bool
	n := 0
	for _, r := range ranges {
		require.GreaterOrEqual(t, len(r), 3)
		start, ok1 := r[0].(int64)
		end, ok2 := r[1].(int64)
		require.True(t, ok1 && ok2, "range %v", r)
		for s := start; s <= end; s++ {
			require.False(t, seen[s], "slot %d served twice", s)
			seen[s] = true
			n++
		}
	}
	return n
}
