package config

import (
	"context"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/internal/dev/testpki"
)

// startTLS starts a TLS-only redis-server that requires client
// certificates signed by p's CA.
func startTLS(t *testing.T, p *testpki.PKI) *redistest.Server {
	t.Helper()
	return redistest.Start(t, redistest.WithTLS(p.ServerCert, p.ServerKey, p.CA, p.Client),
		redistest.WithArgs("--tls-auth-clients", "yes"))
}

// tlsURL is a rediss:// URL to srv with the given userinfo ("" for none)
// and tls_ options (name, value pairs).
func tlsURL(srv *redistest.Server, userinfo string, opts ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(opts); i += 2 {
		q.Set(opts[i], opts[i+1])
	}
	u := "rediss://"
	if userinfo != "" {
		u += userinfo + "@"
	}
	u += srv.Addr() + "/0"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

func pkiOpts(p *testpki.PKI) []string {
	return []string{"tls_ca", p.CA, "tls_cert", p.ClientCert, "tls_key", p.ClientKey}
}

// The ACL user of the tests and the commands it is granted: the minimal
// set the stores and both clients need (TestACLMinimalCommands holds
// it), for every algorithm, Peek, Reset, batching and server_time. The
// README's config section lists the same.
const (
	aclUser     = "limiter"
	aclPassword = "pw-Zq81-never-printed"
)

// aclClientCommands are what the stores and clients send themselves.
var aclClientCommands = []string{
	"evalsha", "eval", "evalsha_ro", "eval_ro", "del",
	"client|tracking", // rueidis turns client-side caching on at connect
}

// aclScriptCommands are what the Lua scripts call: Redis checks a script's
// commands against the user's ACL too.
var aclScriptCommands = []string{
	"decrby", "get", "getrange", "incrby", "pexpire", "set", "setrange", "time", "zadd", "zcard", "zcount", "zrange",
	"zrangebyscore", "zrem", "zremrangebyrank", "zremrangebyscore", "zscore",
}

var aclCommands = append(slices.Clone(aclClientCommands), aclScriptCommands...)

// aclClusterCommands add what the clients ask a cluster's nodes.
var aclClusterCommands = append(slices.Clone(aclCommands), "cluster|slots")

// setACLUser (re)creates the ACL user with the key prefix "limitkit:*" and
// cmds.
func setACLUser(t *testing.T, srv *redistest.Server, cmds []string) {
	t.Helper()
	args := []string{"ACL", "SETUSER", aclUser, "reset", "on", ">" + aclPassword, "~limitkit:*"}
	for _, c := range cmds {
		args = append(args, "+"+c)
	}
	_, err := srv.Do(args...)
	require.NoError(t, err)
}

// aclFile is a config file on url with one policy per algorithm (one with
// a guard), decided at the server's clock, and a policy whose keys are
// outside the ACL user's prefix.
const aclFile = `
backend:
  url: '%s'
  client: %s
  server_time: true
policies:
  log: {algorithm: sliding_log, limit: 3, window: 1m, guard: {limit: 100, window: 1h}}
  counter: {algorithm: sliding_counter, limit: 3, window: 1m}
  fixed: {algorithm: fixed_window, limit: 3, window: 1m}
  compact: {algorithm: compact_log, limit: 3, window: 1m}
  two: {algorithm: two_level, limit: 3, window: 1m}
  gcra: {algorithm: gcra, limit: 3, window: 1m}
  outside: {limit: 3, window: 1m, prefix: "other:"}
`

// exercise decides with every policy but "outside": Reset, Peek twice (EVALSHA_RO
// after EVAL_RO loaded the script), four Allows of which exactly three are
// admitted, Reset, an Allow admitted again, and concurrent Allows that may
// travel in one batch. It returns the first error or wrong decision.
func exercise(ctx context.Context, set *Set) error {
	for _, name := range set.Names() {
		if name == "outside" {
			continue
		}
		lim := set.Limiter(name)
		key := "k-" + name
		if err := lim.Reset(ctx, key); err != nil { // from an earlier run
			return fmt.Errorf("%s: reset: %w", name, err)
		}
		for range 2 {
			if _, err := lim.Peek(ctx, key); err != nil {
				return fmt.Errorf("%s: peek: %w", name, err)
			}
		}
		for i := range 4 {
			d, err := lim.Allow(ctx, key)
			if err != nil {
				return fmt.Errorf("%s: allow: %w", name, err)
			}
			if d.Allowed != (i < 3) {
				return fmt.Errorf("%s: allow %d: allowed=%v", name, i+1, d.Allowed)
			}
		}
		if err := lim.Reset(ctx, key); err != nil {
			return fmt.Errorf("%s: reset: %w", name, err)
		}
		if d, err := lim.Allow(ctx, key); err != nil || !d.Allowed {
			return fmt.Errorf("%s: allow after reset: allowed=%v: %w", name, d.Allowed, err)
		}
		var (
			wg    sync.WaitGroup
			mu    sync.Mutex
			first error
		)
		for i := range 8 {
			wg.Go(func() {
				if _, err := lim.Allow(ctx, fmt.Sprintf("b-%s-%d", name, i)); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if first != nil {
			return fmt.Errorf("%s: concurrent allow: %w", name, first)
		}
	}
	return nil
}

// buildFrom parses and builds a config file and runs fn on the Set; it
// returns the first error of the three.
func buildFrom(t *testing.T, file string, fn func(context.Context, *Set) error) error {
	t.Helper()
	cfg, err := Parse([]byte(file), YAML)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	set, err := cfg.Build(ctx)
	if err != nil {
		return err
	}
	defer set.Close()
	return fn(ctx, set)
}

// TestTLSPrivateCA: a TLS-only redis-server with a CA of the test's own,
// which requires client certificates, reached from a config file with
// both clients as an ACL user limited to the limiter's prefix: decisions
// are right, a key outside the prefix is refused naming NOPERM, and the
// password is in no error. Control: the same URL without tls_ca fails,
// naming tls_ca (as every rediss:// URL did before the options).
func TestTLSPrivateCA(t *testing.T) {
	p := testpki.New(t)
	srv := startTLS(t, p)
	setACLUser(t, srv, aclCommands)
	_, err := srv.Do("SET", "other:x", "1") // the default user reaches it
	require.NoError(t, err)
	for _, client := range []string{GoRedis, Rueidis} {
		t.Run(client, func(t *testing.T) {
			u := tlsURL(srv, aclUser+":"+aclPassword, pkiOpts(p)...)
			err := buildFrom(t, fmt.Sprintf(aclFile, u, client), func(ctx context.Context, set *Set) error {
				if err := exercise(ctx, set); err != nil {
					return err
				}
				_, err := set.Limiter("outside").Allow(ctx, "k")
				require.ErrorContains(t, err, "NOPERM")
				require.NotContains(t, err.Error(), aclPassword)
				return nil
			})
			require.NoError(t, err)

			// tls_server_name: the certificate's DNS name verifies.
			u = tlsURL(srv, aclUser+":"+aclPassword, append(pkiOpts(p), "tls_server_name", testpki.ServerName)...)
			require.NoError(t, buildFrom(t, fmt.Sprintf(aclFile, u, client), exercise))

			// Control: without tls_ca the system's trust store is used.
			u = tlsURL(srv, aclUser+":"+aclPassword, "tls_cert", p.ClientCert, "tls_key", p.ClientKey)
			err = buildFrom(t, fmt.Sprintf(aclFile, u, client), exercise)
			require.ErrorContains(t, err, "not signed by a CA in tls_ca")
			require.NotContains(t, err.Error(), aclPassword)
		})
	}
}

// TestTLSErrors: each TLS setting that is wrong is named, with both
// clients, and no error quotes a file's contents or the password. The
// first cases fail in Parse; the others when the client connects.
func TestTLSErrors(t *testing.T) {
	p := testpki.New(t)
	srv := startTLS(t, p)
	setACLUser(t, srv, aclCommands)
	notPEM := filepath.Join(p.Dir, "not.pem")
	const content = "file-content-SHOULD-NOT-APPEAR"
	require.NoError(t, os.WriteFile(notPEM, []byte(content), 0o600))
	user := aclUser + ":" + aclPassword
	cases := []struct {
		name, url, want string
	}{
		{"ca unreadable", tlsURL(srv, user, "tls_ca", filepath.Join(p.Dir, "missing.crt")),
			"tls_ca: cannot read the CA file: open " + filepath.Join(p.Dir, "missing.crt") + ": no such file or directory"},
		{"ca not pem", tlsURL(srv, user, "tls_ca", notPEM), "tls_ca: " + notPEM + " holds no PEM certificate"},
		{"cert key mismatch", tlsURL(srv, user, "tls_ca", p.CA, "tls_cert", p.ClientCert, "tls_key", p.OtherKey),
			"tls_cert and tls_key do not match"},
		{"key not pem", tlsURL(srv, user, "tls_ca", p.CA, "tls_cert", p.ClientCert, "tls_key", notPEM),
			"tls_cert, tls_key: not a PEM certificate and its PEM private key"},
		{"cert without key", tlsURL(srv, user, "tls_ca", p.CA, "tls_cert", p.ClientCert), "tls_cert and tls_key go together"},
		{"plain scheme", strings.Replace(tlsURL(srv, user, "tls_ca", p.CA), "rediss://", "redis://", 1), "the tls_ options need TLS"},
		{"typo", tlsURL(srv, user, append(pkiOpts(p), "tls_sever_name", testpki.ServerName)...), `no URL option "tls_sever_name" (did you mean "tls_server_name"?)`},
		{"server name", tlsURL(srv, user, append(pkiOpts(p), "tls_server_name", "wrong.example")...),
			"set tls_server_name to a name the certificate holds"},
		{"no client certificate", tlsURL(srv, user, "tls_ca", p.CA), "(tls-auth-clients yes); set tls_cert and tls_key"},
		{"client certificate of another CA", tlsURL(srv, user, "tls_ca", p.CA, "tls_cert", p.RogueCert, "tls_key", p.RogueKey),
			"refused the client certificate (tls_cert)"},
		{"wrong password", tlsURL(srv, aclUser+":"+aclPassword+"x", pkiOpts(p)...), "WRONGPASS"},
	}
	// A line of the client key's base64: no error may hold any of it.
	keyPEM, err := os.ReadFile(p.ClientKey)
	require.NoError(t, err)
	keyLine := strings.Split(string(keyPEM), "\n")[1]
	for _, client := range []string{GoRedis, Rueidis} {
		for _, c := range cases {
			t.Run(client+"/"+c.name, func(t *testing.T) {
				err := buildFrom(t, fmt.Sprintf(aclFile, c.url, client), exercise)
				require.Error(t, err)
				t.Log(err)
				require.ErrorContains(t, err, c.want)
				for _, secret := range []string{aclPassword, content, "PRIVATE KEY", keyLine[:16]} {
					require.NotContains(t, err.Error(), secret)
				}
			})
		}
	}
}

// TestACLMinimalCommands: aclCommands is exactly what the stores need.
// With it both clients decide (exercise passes); without any one of
// aclClientCommands at least one client is refused it; and
// aclScriptCommands are the commands the Lua sources call, no more (a
// small workload does not reach every branch of the scripts, so these
// are read from the source). The scripts are flushed before each try, so
// that the EVAL fallbacks run too. TIME is needed only with server_time,
// WAIT only with replica_ack.
func TestACLMinimalCommands(t *testing.T) {
	srcs, err := filepath.Glob("../../algorithms/*.lua")
	require.NoError(t, err)
	require.NotEmpty(t, srcs)
	called := map[string]bool{}
	re := regexp.MustCompile(`redis\.p?call\(\s*(.)`)
	name := regexp.MustCompile(`redis\.p?call\(\s*'([A-Za-z_|]+)'`)
	for _, src := range srcs {
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		for _, m := range re.FindAllSubmatch(b, -1) {
			require.Equal(t, "'", string(m[1]), "%s: a redis.call whose command is not a literal: list it by hand", src)
		}
		for _, m := range name.FindAllSubmatch(b, -1) {
			called[strings.ToLower(string(m[1]))] = true
		}
	}
	require.ElementsMatch(t, aclScriptCommands, slices.Collect(maps.Keys(called)))

	if testing.Short() {
		t.Skip("tries each command's removal against a real server")
	}
	p := testpki.New(t)
	srv := startTLS(t, p)
	try := func(cmds []string, client string) error {
		setACLUser(t, srv, cmds)
		_, err := srv.Do("SCRIPT", "FLUSH")
		require.NoError(t, err)
		_, err = srv.Do("FLUSHALL")
		require.NoError(t, err)
		u := tlsURL(srv, aclUser+":"+aclPassword, pkiOpts(p)...)
		return buildFrom(t, fmt.Sprintf(aclFile, u, client), exercise)
	}
	for _, client := range []string{GoRedis, Rueidis} {
		require.NoError(t, try(aclCommands, client), client)
		// TIME only with server_time (the control: with it, removing
		// "time" fails below).
		noTime := slices.DeleteFunc(slices.Clone(aclCommands), func(c string) bool { return c == "time" })
		setACLUser(t, srv, noTime)
		u := tlsURL(srv, aclUser+":"+aclPassword, pkiOpts(p)...)
		file := strings.Replace(fmt.Sprintf(aclFile, u, client), "server_time: true", "server_time: false", 1)
		require.NoError(t, buildFrom(t, file, exercise), client)
		require.ErrorContains(t, try(noTime, client), "can't run this command", client)

		// replica_ack needs WAIT (no replica here: admitted unconfirmed).
		ack := strings.Replace(fmt.Sprintf(aclFile, u, client), "server_time: true",
			"server_time: true\n  replica_ack: {replicas: 1, timeout: 10ms, on_short: admit}", 1)
		allowOnce := func(ctx context.Context, set *Set) error {
			d, err := set.Limiter("fixed").Allow(ctx, "ack")
			if err == nil && !d.Unconfirmed {
				return fmt.Errorf("not waited for: %+v", d)
			}
			return err
		}
		setACLUser(t, srv, append(slices.Clone(aclCommands), "wait"))
		require.NoError(t, buildFrom(t, ack, allowOnce), client)
		setACLUser(t, srv, aclCommands)
		require.ErrorContains(t, buildFrom(t, ack, allowOnce), "NOPERM", client)
	}
	for _, cmd := range aclClientCommands {
		without := slices.DeleteFunc(slices.Clone(aclCommands), func(c string) bool { return c == cmd })
		var errs []error
		for _, client := range []string{GoRedis, Rueidis} {
			if err := try(without, client); err != nil {
				require.ErrorContains(t, err, "NOPERM", "without %s, %s", cmd, client)
				errs = append(errs, err)
				t.Logf("%s needs %s", client, cmd)
			}
		}
		require.NotEmpty(t, errs, "neither client needs %s: drop it from aclClientCommands", cmd)
	}
}

// TestTLSSentinel: rediss+sentinel:// reaches a TLS-only master that
// requires client certificates, with the private CA and an ACL user:
// rueidis through sentinels in plain RESP (it dials sentinels without
// TLS), go-redis through sentinels with a TLS port (it dials them with
// TLS; control: their plain port fails). The user needs ROLE too (rueidis checks the
// master's role; the control: without it, NOPERM). Control: without
// tls_cert the master refuses the connection, and the error says so.
func TestTLSSentinel(t *testing.T) {
	p := testpki.New(t)
	sn := redistest.StartSentinel(t, redistest.WithTLS(p.ServerCert, p.ServerKey, p.CA, p.Client),
		redistest.WithArgs("--tls-auth-clients", "yes"))
	// rueidis asks the master for its ROLE: a sentinel URL's user needs it.
	setACLUser(t, sn.Master, aclCommands)
	base := "rediss+sentinel://" + aclUser + ":" + aclPassword + "@" + sn.SentinelAddrs()[0] + "?master_name=" + sn.MasterName
	u := base + "&tls_ca=" + url.QueryEscape(p.CA) + "&tls_cert=" + url.QueryEscape(p.ClientCert) + "&tls_key=" + url.QueryEscape(p.ClientKey)
	require.ErrorContains(t, buildFrom(t, fmt.Sprintf(aclFile, u, Rueidis), exercise), "NOPERM this user has no permissions to run the 'role' command")
	setACLUser(t, sn.Master, append(slices.Clone(aclCommands), "role"))
	require.NoError(t, buildFrom(t, fmt.Sprintf(aclFile, u, Rueidis), exercise))

	u = base + "&tls_ca=" + url.QueryEscape(p.CA)
	err := buildFrom(t, fmt.Sprintf(aclFile, u, Rueidis), exercise)
	require.ErrorContains(t, err, "(tls-auth-clients yes); set tls_cert and tls_key")
	require.NotContains(t, err.Error(), aclPassword)

	// go-redis dials the sentinels with TLS too: sentinels with a TLS
	// port, which they announce.
	sn = redistest.StartSentinel(t, redistest.WithTLS(p.ServerCert, p.ServerKey, p.CA, p.Client), redistest.WithTLSSentinels(),
		redistest.WithArgs("--tls-auth-clients", "yes"))
	setACLUser(t, sn.Master, aclCommands)
	// (go-redis reads a sentinel URL's userinfo as the sentinels' user,
	// and username and password options as the master's.)
	u = "rediss+sentinel://" + sn.SentinelTLSAddrs()[0] + "?master_name=" + sn.MasterName + "&username=" + aclUser + "&password=" + aclPassword +
		"&tls_ca=" + url.QueryEscape(p.CA) + "&tls_cert=" + url.QueryEscape(p.ClientCert) + "&tls_key=" + url.QueryEscape(p.ClientKey)
	require.NoError(t, buildFrom(t, fmt.Sprintf(aclFile, u, GoRedis), exercise))
	u = strings.Replace(u, sn.SentinelTLSAddrs()[0], sn.SentinelAddrs()[0], 1) + "&dial_timeout=300ms" // control: the plain port
	err = buildFrom(t, fmt.Sprintf(aclFile, u, GoRedis), exercise)
	require.Error(t, err)
	require.NotContains(t, err.Error(), aclPassword)
}

// TestTLSCluster: rediss+cluster:// reaches a TLS-only cluster (its nodes
// gossip over TLS too) that requires client certificates, with the
// private CA and an ACL user on every node, with both clients; the user
// needs CLUSTER SLOTS too (control: without it, NOPERM). Control: without
// tls_cert it is refused, and the error says so.
func TestTLSCluster(t *testing.T) {
	p := testpki.New(t)
	c := redistest.StartCluster(t, 3, 0, redistest.WithTLS(p.ServerCert, p.ServerKey, p.CA, p.Client),
		redistest.WithArgs("--tls-auth-clients", "yes"))
	for _, n := range c.Nodes() {
		setACLUser(t, n, aclClusterCommands)
	}
	addrs := c.Addrs()
	base := "rediss+cluster://" + aclUser + ":" + aclPassword + "@" + addrs[0] + "?addr=" + addrs[1] + "&addr=" + addrs[2] +
		"&tls_ca=" + url.QueryEscape(p.CA)
	for _, client := range []string{GoRedis, Rueidis} {
		t.Run(client, func(t *testing.T) {
			u := base + "&tls_cert=" + url.QueryEscape(p.ClientCert) + "&tls_key=" + url.QueryEscape(p.ClientKey)
			// Control: the clients ask each node for CLUSTER SLOTS.
			for _, n := range c.Nodes() {
				setACLUser(t, n, aclCommands)
			}
			err := buildFrom(t, fmt.Sprintf(aclFile, u, client), exercise)
			require.ErrorContains(t, err, "NOPERM this user has no permissions to run the 'cluster|slots' command")
			for _, n := range c.Nodes() {
				setACLUser(t, n, aclClusterCommands)
			}
			require.NoError(t, buildFrom(t, fmt.Sprintf(aclFile, u, client), exercise))
			err = buildFrom(t, fmt.Sprintf(aclFile, base, client), exercise)
			require.ErrorContains(t, err, "(tls-auth-clients yes); set tls_cert and tls_key")
			require.NotContains(t, err.Error(), aclPassword)
		})
	}
}
