package storeurl

import (
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/internal/dev/testpki"
)

// parsed parses raw with opts, failing the test on an error.
func parsed(t *testing.T, raw string, opts ...Option) target {
	t.Helper()
	o, err := resolve(opts)
	require.NoError(t, err)
	tg, err := parse(raw, o)
	require.NoError(t, err, raw)
	return tg
}

// TestRedactURL: RedactURL hides the userinfo of malformed URLs too.
func TestRedactURL(t *testing.T) {
	for _, raw := range []string{"redis://:p@ss/Sup3rS3cretPW@h/0", "redis://:Sup3r?S3cretPW@h/0", "redis://Xy9Qw7:Sup3r#S3cretPW@h/0",
		"redis:Sup3rS3cretPW@h/0", "rediss+cluster://Xy9Qw7:Sup3r S3cretPW@h?addr=h"} {
		r := RedactURL(raw)
		for _, s := range []string{"Sup3r", "S3cretPW", "Xy9Qw7"} {
			require.NotContains(t, r, s, raw)
		}
	}
	require.Equal(t, "redis://xxxxx@h:6379/0", RedactURL("redis://u:p/w@h:6379/0"))
	require.Equal(t, "redis://h:6379/0", RedactURL("redis://h:6379/0"))
}

// TestCredentialsReachTheClient: the parsers get the URL without its
// userinfo, and the credentials are put where they would have put them;
// WithUsername and WithPassword replace the URL's (for a sentinel URL,
// the master's).
func TestCredentialsReachTheClient(t *testing.T) {
	tg := parsed(t, "redis://al%40ice:p%2Fw@127.0.0.1:6379/0")
	require.Equal(t, []string{"al@ice", "p/w"}, []string{tg.single.Username, tg.single.Password})
	tg = parsed(t, "redis://al%40ice:p%2Fw@127.0.0.1:6379/0", WithUsername("bob"), WithPassword("given"))
	require.Equal(t, []string{"bob", "given"}, []string{tg.single.Username, tg.single.Password})
	tg = parsed(t, "redis+cluster://:pw@127.0.0.1:7000?addr=127.0.0.1:7001")
	require.Equal(t, "pw", tg.cluster.Password)
	tg = parsed(t, "redis+cluster://127.0.0.1:7000?addr=127.0.0.1:7001", WithPassword("given"), WithPoolSize(7))
	require.Equal(t, "given", tg.cluster.Password)
	require.Equal(t, 7, tg.cluster.PoolSize)
	tg = parsed(t, "redis+sentinel://su:spw@127.0.0.1:26379?master_name=m&password=mpw")
	require.Equal(t, []string{"su", "spw", "mpw"}, []string{tg.failover.SentinelUsername, tg.failover.SentinelPassword, tg.failover.Password})
	tg = parsed(t, "redis+sentinel://su:spw@127.0.0.1:26379?master_name=m&password=mpw", WithPassword("given"))
	require.Equal(t, []string{"su", "spw", "given"}, []string{tg.failover.SentinelUsername, tg.failover.SentinelPassword, tg.failover.Password})
	tg = parsed(t, "redis+sentinel://u:p%40w@127.0.0.1:26379?master_name=m", WithClient(Rueidis))
	require.Equal(t, []string{"u", "p@w", "m"}, []string{tg.rueidis.Username, tg.rueidis.Password, tg.rueidis.Sentinel.MasterSet})
	tg = parsed(t, "redis://127.0.0.1:6379/0", WithClient(Rueidis), WithPassword("given"), WithDialTimeout(1234e6))
	require.Equal(t, "given", tg.rueidis.Password)
	require.Equal(t, "1.234s", tg.dialTimeout().String())
}

// TestBadOptions: options out of range, an unknown client and store
// options on memory:// are refused, saying what to change.
func TestBadOptions(t *testing.T) {
	for want, opts := range map[string][]Option{
		"WithPoolSize(-1)":                   {WithPoolSize(-1)},
		"WithDialTimeout(-1s)":               {WithDialTimeout(-1e9)},
		`unknown client "jedis"`:             {WithClient("jedis")},
		`unknown client "rueidiss" (did you`: {WithClient("rueidiss")},
	} {
		_, err := Parse("redis://127.0.0.1:6379/0", opts...)
		require.ErrorContains(t, err, want)
	}
	_, err := Parse("memory://", WithServerTime())
	require.EqualError(t, err, "storeurl: WithServerTime needs a Redis URL; memory:// keeps its state in process")
	k, err := Parse("rediss+cluster://127.0.0.1:7000?addr=127.0.0.1:7001")
	require.NoError(t, err)
	require.Equal(t, Cluster, k)
}

// TestTLSOptionsEveryForm: every rediss form with both clients carries the
// tls_ options into the TLS configuration the client dials with (for
// go-redis sentinels too; rueidis dials its sentinels without TLS), and
// none reaches a client parser (which would refuse it). Control: the same
// URLs without the options have no CA and no certificate.
func TestTLSOptionsEveryForm(t *testing.T) {
	p := testpki.New(t)
	q := "tls_ca=" + url.QueryEscape(p.CA) + "&tls_cert=" + url.QueryEscape(p.ClientCert) + "&tls_key=" + url.QueryEscape(p.ClientKey) +
		"&tls_server_name=" + testpki.ServerName
	for _, u := range []string{
		"rediss://u:pw@127.0.0.1:6379/0?",
		"rediss+cluster://u:pw@127.0.0.1:7000?addr=127.0.0.1:7001&",
		"rediss+sentinel://u:pw@127.0.0.1:26379?master_name=m&",
	} {
		for _, client := range clients {
			tg := parsed(t, u+q, WithClient(client))
			conf := tg.tlsConfig()
			require.NotNil(t, conf, u)
			require.NotNil(t, conf.RootCAs, u)
			require.Len(t, conf.Certificates, 1, u)
			require.Equal(t, testpki.ServerName, conf.ServerName, u)

			tg = parsed(t, strings.TrimSuffix(strings.TrimSuffix(u, "&"), "?"), WithClient(client))
			require.Nil(t, tg.tlsConfig().RootCAs, u)
			require.Empty(t, tg.tlsConfig().Certificates, u)
		}
	}
}
