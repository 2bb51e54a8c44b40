package storeurl

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/internal/boundid"
	"github.com/limitkit/limitkit/internal/suggest"
)

// target is a URL read by the chosen client's parser, with the options
// applied.
type target struct {
	kind    Kind
	client  string
	maxKeys int // memory://?max_keys=N; 0 for the default

	single   *redis.Options
	cluster  *redis.ClusterOptions
	failover *redis.FailoverOptions
	rueidis  rueidis.ClientOption
}

// schemes are the URL schemes parse reads.
var schemes = []string{"memory", "redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"}

// parse reads raw. Errors never repeat the URL's userinfo, however
// malformed the URL: parseURL checks it before any parser sees it, and the
// client parsers get the URL without it.
func parse(raw string, o *options) (target, error) {
	switch o.client {
	case GoRedis, Rueidis:
	default:
		return target{}, fmt.Errorf("unknown client %q%s; write %q or %q", clip(o.client, 40),
			suggest.DidYouMean(o.client, []string{GoRedis, Rueidis}), GoRedis, Rueidis)
	}
	u, err := parseURL(raw)
	if err != nil {
		return target{}, err
	}
	scheme := strings.ToLower(u.Scheme)
	switch scheme {
	case "memory":
		return memoryTarget(u, o)
	case "redis", "rediss":
		if u.Query().Has("addr") {
			return target{}, errors.New("a redis:// URL names one server; for several addresses use redis+cluster:// or redis+sentinel://")
		}
		return redisTarget(Single, u, scheme, raw, o)
	case "redis+cluster", "rediss+cluster":
		return redisTarget(Cluster, u, strings.TrimSuffix(scheme, "+cluster"), raw, o)
	case "redis+sentinel", "rediss+sentinel":
		return redisTarget(Sentinel, u, strings.TrimSuffix(scheme, "+sentinel"), raw, o)
	case "":
		return target{}, errors.New("the URL has no scheme; write memory://, redis://host:port/db, rediss://, redis+cluster:// or redis+sentinel://")
	}
	return target{}, fmt.Errorf("unknown scheme %q%s; write memory://, redis://, rediss://, redis+cluster:// or redis+sentinel://",
		clip(u.Scheme, 24), suggest.DidYouMean(scheme, schemes))
}

func memoryTarget(u *url.URL, o *options) (target, error) {
	t := target{kind: Memory}
	if u.Host != "" || (u.Path != "" && u.Path != "/") || u.User != nil || u.Opaque != "" {
		return t, errors.New("memory:// takes no host or path; write memory:// or memory://?max_keys=N")
	}
	for k, vs := range u.Query() {
		if k != "max_keys" {
			return t, fmt.Errorf("memory:// has no option %q%s; its only option is max_keys", clip(k, 40), suggest.DidYouMean(k, []string{"max_keys"}))
		}
		n, err := strconv.Atoi(vs[len(vs)-1])
		if err != nil || n < 1 {
			return t, fmt.Errorf("max_keys %q: write a whole number of at least 1", clip(vs[len(vs)-1], 24))
		}
		t.maxKeys = n
	}
	if what := o.redisOnly(); what != "" {
		return t, fmt.Errorf("%s needs a Redis URL; memory:// keeps its state in process", what)
	}
	return t, nil
}

// rueidisOptions are the query options rueidis.ParseURL reads; it ignores
// others, which go-redis refuses, so a typo would pass silently.
var rueidisOptions = []string{"addr", "client_cache", "client_name", "db", "dial_timeout", "master_set", "max_retries",
	"protocol", "skip_verify", "write_timeout"}

// redisTarget parses u as scheme (redis or rediss) with the client's parser
// for the topology. The parser gets u without its userinfo, so that none of
// its errors can hold the password; the credentials are set afterwards,
// where the parser would have put them.
func redisTarget(kind Kind, u *url.URL, scheme, raw string, o *options) (target, error) {
	t := target{kind: kind, client: o.client}
	if u.Opaque != "" {
		return t, fmt.Errorf("write %s://host:port, with \"//\" after the scheme", scheme)
	}
	v := *u
	v.User = nil
	v.Scheme = scheme
	q := v.Query()
	ts, err := takeTLSOptions(q)
	if err != nil {
		return t, err
	}
	if ts.set() && scheme != "rediss" {
		return t, fmt.Errorf("the tls_ options need TLS: write rediss://, rediss+cluster:// or rediss+sentinel:// (not %s)", clip(u.Scheme, 24))
	}
	if ts.set() {
		v.RawQuery = q.Encode()
	}
	if kind == Sentinel {
		// go-redis calls the monitored master's name master_name, rueidis
		// master_set; accept either and hand each parser its own.
		q := v.Query()
		name := q.Get("master_name")
		if name == "" {
			name = q.Get("master_set")
		}
		if name == "" {
			return t, errors.New("a sentinel URL names the master: add ?master_name=NAME")
		}
		q.Del("master_name")
		q.Del("master_set")
		if o.client == GoRedis {
			q.Set("master_name", name)
		} else {
			q.Set("master_set", name)
		}
		v.RawQuery = q.Encode()
	}
	if o.client == Rueidis {
		for k := range v.Query() {
			if !slices.Contains(rueidisOptions, k) {
				return t, fmt.Errorf("rueidis has no URL option %q%s; its options are %s", clip(k, 40), suggest.DidYouMean(k, rueidisOptions),
					strings.Join(rueidisOptions, ", "))
			}
		}
	}
	if err := t.parseClient(v.String(), u, o); err != nil {
		return t, fmt.Errorf("%s: %w", o.client, scrubbed(err, append(secretsOf(raw, u), o.secrets()...)))
	}
	if ts.set() {
		if err := ts.apply(t.tlsConfig()); err != nil {
			return t, err
		}
	}
	return t, nil
}

// parseClient runs the client's parser on raw, a URL without userinfo, and
// sets the credentials and the options on what it made.
func (t *target) parseClient(raw string, u *url.URL, o *options) error {
	user, password := userinfo(u)
	if o.username != nil {
		user = *o.username
	}
	if o.password != nil {
		password = *o.password
	}
	var err error
	if o.client == Rueidis {
		if t.rueidis, err = rueidis.ParseURL(raw); err != nil {
			return bounded(err)
		}
		r := &t.rueidis
		r.Username, r.Password = user, password
		if r.TLSConfig != nil {
			r.DialCtxFn = rueidisTLSDial
		}
		if o.dialTimeout > 0 {
			r.Dialer.Timeout = o.dialTimeout
		}
		return nil
	}
	switch t.kind {
	case Single:
		if t.single, err = redis.ParseURL(raw); err != nil {
			return bounded(err)
		}
		s := t.single
		s.Username, s.Password = user, password
		goRedisCommon(&s.ContextTimeoutEnabled, &s.DialTimeout, &s.PoolSize, &s.Dialer, s.TLSConfig, o)
	case Cluster:
		if t.cluster, err = redis.ParseClusterURL(raw); err != nil {
			return bounded(err)
		}
		c := t.cluster
		c.Username, c.Password = user, password
		goRedisCommon(&c.ContextTimeoutEnabled, &c.DialTimeout, &c.PoolSize, &c.Dialer, c.TLSConfig, o)
	case Sentinel:
		if t.failover, err = redis.ParseFailoverURL(raw); err != nil {
			return bounded(err)
		}
		// go-redis reads a sentinel URL's userinfo as the sentinels'
		// credentials, and ?username=&password= as the master's.
		f := t.failover
		f.SentinelUsername, f.SentinelPassword = userinfo(u)
		if o.username != nil {
			f.Username = *o.username
		}
		if o.password != nil {
			f.Password = *o.password
		}
		goRedisCommon(&f.ContextTimeoutEnabled, &f.DialTimeout, &f.PoolSize, &f.Dialer, f.TLSConfig, o)
	}
	return nil
}

// goRedisCommon sets what every go-redis options struct gets: deadlines
// that end calls inside the client (so a fallback's deadline does), the
// TLS dialer that explains a handshake with a plain server, and the
// options given to Open.
func goRedisCommon(ctxTimeout *bool, dialTimeout *time.Duration, poolSize *int,
	dialer *func(ctx context.Context, network, addr string) (net.Conn, error), conf *tls.Config, o *options) {
	*ctxTimeout = true
	if o.dialTimeout > 0 {
		*dialTimeout = o.dialTimeout
	}
	if o.poolSize > 0 {
		*poolSize = o.poolSize
	}
	if conf != nil {
		*dialer = tlsDialer(conf, *dialTimeout)
	}
}

// tlsConfig returns the TLS configuration the client parser made for a
// rediss URL (nil for redis://): the one its dialer gets for every node
// and, with go-redis, every sentinel.
func (t *target) tlsConfig() *tls.Config {
	switch {
	case t.single != nil:
		return t.single.TLSConfig
	case t.cluster != nil:
		return t.cluster.TLSConfig
	case t.failover != nil:
		return t.failover.TLSConfig
	}
	return t.rueidis.TLSConfig
}

// dialTimeout is the dial timeout the client uses: the URL's or Open's,
// else the client's default.
func (t *target) dialTimeout() time.Duration {
	d := time.Duration(0)
	switch {
	case t.single != nil:
		d = t.single.DialTimeout
	case t.cluster != nil:
		d = t.cluster.DialTimeout
	case t.failover != nil:
		d = t.failover.DialTimeout
	default:
		d = t.rueidis.Dialer.Timeout
	}
	if d <= 0 {
		return defaultDialTimeout
	}
	return d
}

// defaultDialTimeout is both clients' default.
const defaultDialTimeout = 5 * time.Second

// newGoRedis makes the go-redis client for a Redis target.
func (t *target) newGoRedis() redis.UniversalClient {
	switch t.kind {
	case Cluster:
		return redis.NewClusterClient(t.cluster)
	case Sentinel:
		return redis.NewFailoverClient(t.failover)
	}
	return redis.NewClient(t.single)
}

// maxClientError is the longest client library error kept whole.
const maxClientError = 256

// boundedError is a client library's URL error whose text echoes the
// input (a path of kilobytes): its message is cut to a bounded quote, and
// Unwrap still gives the cause.
type boundedError struct{ err error }

func (e boundedError) Error() string { return boundid.Quote(e.err.Error()) }
func (e boundedError) Unwrap() error { return e.err }

// bounded returns err, or a boundedError when its text is long.
func bounded(err error) error {
	if len(err.Error()) <= maxClientError {
		return err
	}
	return boundedError{err}
}
