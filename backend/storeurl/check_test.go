package storeurl

import (
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/dev/testpki"
)

// openFails opens u and returns the error, which must be a check error
// (Connect) holding want and none of secrets.
func openFails(t *testing.T, u, want string, opts ...Option) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	op, err := Open(ctx, u, opts...)
	if err == nil {
		_ = op.Close()
	}
	require.Error(t, err, "Open must fail, not the first decision")
	t.Log(err)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.True(t, e.Connect, "a check error: %v", err)
	require.ErrorContains(t, err, want)
	return err
}

// TestOpenChecksTLS: rediss:// to a server without TLS fails Open with
// both clients, saying so (go-redis used to fail only the first decision,
// with a bare deadline), and redis:// to a TLS-only server fails it with
// a hint to write rediss://.
func TestOpenChecksTLS(t *testing.T) {
	plain := redistest.Start(t)
	p := testpki.New(t)
	tlsOnly := redistest.Start(t, redistest.WithTLS(p.ServerCert, p.ServerKey, p.CA, p.Client))
	for _, c := range clients {
		t.Run(c, func(t *testing.T) {
			openFails(t, "rediss://"+plain.Addr()+"/0?dial_timeout=300ms", "looks like TLS (rediss://) to a non-TLS server", WithClient(c))
			openFails(t, "redis://"+tlsOnly.Addr()+"/0?dial_timeout=300ms", "write rediss://", WithClient(c))
			// Control: the right scheme opens.
			op, err := Open(t.Context(), "rediss://"+tlsOnly.Addr()+"/0?tls_ca="+url.QueryEscape(p.CA)+
				"&tls_cert="+url.QueryEscape(p.ClientCert)+"&tls_key="+url.QueryEscape(p.ClientKey), WithClient(c))
			require.NoError(t, err)
			take(t, op.Store)
			require.NoError(t, op.Close())
		})
	}
}

// TestOpenChecksPasswords: a missing or wrong password fails Open with
// both clients, saying which, and a password given apart from the URL
// (WithPassword) opens; no error holds a password.
func TestOpenChecksPasswords(t *testing.T) {
	const password = "pw-given-apart-9Qx"
	srv := redistest.Start(t)
	_, err := srv.Do("CONFIG", "SET", "requirepass", password)
	require.NoError(t, err)
	base := "redis://" + srv.Addr() + "/0"
	for _, c := range clients {
		t.Run(c, func(t *testing.T) {
			openFails(t, base, "the server requires a password", WithClient(c))
			err := openFails(t, "redis://:wrong-Zz81@"+srv.Addr()+"/0", "refused the user name and password", WithClient(c))
			require.NotContains(t, err.Error(), "wrong-Zz81")
			err = openFails(t, base, "refused the user name and password", WithClient(c), WithPassword("given-wrong-Qa7"))
			require.NotContains(t, err.Error(), "given-wrong-Qa7")
			op, err := Open(t.Context(), base, WithClient(c), WithPassword(password))
			require.NoError(t, err)
			take(t, op.Store)
			require.NoError(t, op.Close())
		})
	}
}

// TestOpenChecksSentinelMaster: a master name no sentinel monitors fails
// Open with both clients, naming the masters the sentinel does monitor.
func TestOpenChecksSentinelMaster(t *testing.T) {
	sn := redistest.StartSentinel(t)
	base := "redis+sentinel://" + sn.SentinelAddrs()[0] + "?dial_timeout=1s&master_name="
	for _, c := range clients {
		t.Run(c, func(t *testing.T) {
			openFails(t, base+"no-such-master", `no sentinel monitors a master named "no-such-master": fix master_name (the sentinel at `+
				sn.SentinelAddrs()[0]+` monitors "`+sn.MasterName+`")`, WithClient(c))
			op, err := Open(t.Context(), base+sn.MasterName, WithClient(c))
			require.NoError(t, err)
			take(t, op.Store)
			require.NoError(t, op.Close())
		})
	}
}

// TestOpenChecksEveryClusterNode: a cluster URL opens when every master
// answers, and the check runs on each: a master paused (nothing answers
// it) fails Open within the dial timeout plus CheckMargin, with both
// clients.
func TestOpenChecksEveryClusterNode(t *testing.T) {
	cl := redistest.StartCluster(t, 3, 0)
	addrs := cl.Addrs()
	u := "redis+cluster://" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2] + "&dial_timeout=500ms"
	for _, c := range clients {
		op, err := Open(t.Context(), u, WithClient(c))
		require.NoError(t, err, c)
		require.Equal(t, Cluster, op.Kind)
		take(t, op.Store)
		require.NoError(t, op.Close())
	}
	cl.Masters[2].Pause()
	defer cl.Masters[2].Resume()
	for _, c := range clients {
		start := time.Now()
		openFails(t, u, "", WithClient(c))
		t.Logf("%s: failed after %v", c, time.Since(start))
	}
}

// TestOpenRefusesUnreachable: nothing listening fails Open, saying so.
func TestOpenRefusesUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	for _, c := range clients {
		openFails(t, "redis://"+addr+"/0", "nothing listens at that address", WithClient(c))
	}
}

// TestProbeNeedsAPlainRedis: when nothing answers plain Redis (the
// address refuses), the error does not claim a non-TLS server.
func TestProbeNeedsAPlainRedis(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	require.False(t, probe("tcp", addr))
	srv := redistest.Start(t)
	require.True(t, probe("tcp", srv.Addr()))
}

// TestTLSFilesAreBounded: a tls_ca, tls_cert or tls_key of more than
// MaxTLSFileSize bytes, or an endless one (/dev/zero, which ran a process
// out of memory), is refused naming the bound, having read at most one
// byte more. Control: a file of exactly the bound is read (and then
// refused as no PEM).
func TestTLSFilesAreBounded(t *testing.T) {
	p := testpki.New(t)
	dir := t.TempDir()
	big := filepath.Join(dir, "big.pem")
	require.NoError(t, os.WriteFile(big, make([]byte, MaxTLSFileSize+1), 0o600))
	exact := filepath.Join(dir, "exact.pem")
	require.NoError(t, os.WriteFile(exact, []byte(strings.Repeat("x", MaxTLSFileSize)), 0o600))
	files := []string{big}
	if _, err := os.Stat("/dev/zero"); err == nil {
		files = append(files, "/dev/zero")
	}
	for _, f := range files {
		for opt, q := range map[string]string{
			"tls_ca":   "tls_ca=" + url.QueryEscape(f),
			"tls_cert": "tls_cert=" + url.QueryEscape(f) + "&tls_key=" + url.QueryEscape(p.ClientKey),
			"tls_key":  "tls_cert=" + url.QueryEscape(p.ClientCert) + "&tls_key=" + url.QueryEscape(f),
		} {
			_, err := Parse("rediss://127.0.0.1:6379/0?" + q)
			require.ErrorContains(t, err, opt+": ", f)
			require.ErrorContains(t, err, "holds more than 1048576 bytes (MaxTLSFileSize)", f)
		}
	}
	_, err := Parse("rediss://127.0.0.1:6379/0?tls_ca=" + url.QueryEscape(exact))
	require.ErrorContains(t, err, "holds no PEM certificate")
}

// TestRedissSentinelToPlainServers: with rediss+sentinel:// and rueidis
// the sentinels are dialled without TLS (rueidis hands the dialer no TLS
// config for them) and the plain master is reported as such; go-redis
// dials the sentinels with TLS too, and the error says so of them.
func TestRedissSentinelToPlainServers(t *testing.T) {
	sn := redistest.StartSentinel(t)
	u := "rediss+sentinel://" + sn.SentinelAddrs()[0] + "?master_name=" + sn.MasterName + "&dial_timeout=300ms"
	for _, c := range clients {
		openFails(t, u, "looks like TLS (rediss://) to a non-TLS server", WithClient(c))
	}
}
