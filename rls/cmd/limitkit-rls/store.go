package main

// This file alone opens the store: LIMITKIT_BACKEND_URL through
// backend/storeurl, the reference's REDIS_* variables here.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/limiter/storestack"
	"github.com/limitkit/limitkit/rls/internal/envsettings"
)

// denyEntryBytes is about what one deny cache entry costs (its hash key,
// the entry and the map's share), to turn LOCAL_CACHE_SIZE_IN_BYTES into
// entries.
const denyEntryBytes = 128

// minDenyEntries is the least deny cache denycache.New accepts (one entry
// per shard).
const minDenyEntries = 64

// openedStore is the store stack the service decides on, with what to
// close.
type openedStore struct {
	store    backend.Store
	fallback *fallback.Store // nil on memory
	deny     *denycache.Store
	closers  []func() error
	describe string
	// memories are the in-memory stores by name, for their eviction metric.
	memories map[string]*memorystore.Store
}

// registerEvictions exports each in-memory store's active evictions as
// limitkit_memory_store_evictions_total{store="memory"|"local"}, and the
// deny cache's dropped messages.
func (o *openedStore) registerEvictions(reg prometheus.Registerer) error {
	for name, m := range o.memories {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "limitkit_memory_store_evictions_total",
			Help:        "Keys an in-memory store evicted while still inside their window, each getting its full allowance back; raise LIMITKIT_MEMORY_MAX_KEYS when it rises.",
			ConstLabels: prometheus.Labels{"store": name},
		}, func() float64 { return float64(m.ActiveEvictions()) })
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	if d := o.deny; d != nil {
		return reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "limitkit_deny_cache_messages_dropped_total",
			Help: "Deny cache messages to the other instances dropped because 4096 were waiting to be sent (Redis slow or stopped).",
		}, func() float64 { return float64(d.Stats().Dropped) }))
	}
	return nil
}

func (o *openedStore) Close() error {
	var errs []error
	if o.deny != nil {
		errs = append(errs, o.deny.Close())
	}
	for i := len(o.closers) - 1; i >= 0; i-- {
		errs = append(errs, o.closers[i]())
	}
	return errors.Join(errs...)
}

// redisClient is one Redis client, either library, with its store and bus.
type redisClient struct {
	store backend.Store
	bus   denycache.Bus
	close func() error
}

// openStore opens the store the settings name: memory, the reference's
// REDIS_* variables, or LIMITKIT_BACKEND_URL; a Redis store is stacked by
// storestack in the documented order: fallback (fbOpts add hooks) around,
// with LOCAL_CACHE_SIZE_IN_BYTES, a deny cache on the store, whose bus runs
// on the same client. (This used to be denycache(fallback(redis)), the
// other way round, by no recorded reason.)
func openStore(ctx context.Context, s *envsettings.Settings, policy backend.FailurePolicy, log *slog.Logger, fbOpts ...fallback.Option) (*openedStore, error) {
	if s.Memory() {
		m, err := memorystore.New(memorystore.WithMaxKeys(s.MemoryMaxKeys))
		if err != nil {
			return nil, fmt.Errorf("LIMITKIT_MEMORY_MAX_KEYS: %w", err)
		}
		if s.LocalCacheSizeInBytes > 0 {
			log.Warn("LOCAL_CACHE_SIZE_IN_BYTES ignored: the in-memory store answers denials in process already")
		}
		return &openedStore{store: m, memories: map[string]*memorystore.Store{"memory": m},
			describe: fmt.Sprintf("memory (in process, at most %d keys; set REDIS_URL, BACKEND_TYPE=redis or LIMITKIT_BACKEND_URL for a shared store)", s.MemoryMaxKeys)}, nil
	}
	var (
		c    *redisClient
		desc string
		err  error
	)
	if s.BackendURL != "" {
		c, err = openURL(ctx, s)
		desc = storeurl.RedactURL(s.BackendURL)
	} else {
		c, err = openReference(ctx, s, log)
		desc = fmt.Sprintf("%s %s %s", strings.ToLower(s.RedisType), s.RedisSocketType, redactList(s.RedisURL))
	}
	if err != nil {
		return nil, err
	}
	o := &openedStore{closers: []func() error{c.close}, describe: fmt.Sprintf("redis (%s, %s)", desc, s.RedisClient)}
	local, err := memorystore.New(memorystore.WithMaxKeys(s.MemoryMaxKeys))
	if err != nil {
		_ = o.Close()
		return nil, fmt.Errorf("LIMITKIT_MEMORY_MAX_KEYS: %w", err)
	}
	o.memories = map[string]*memorystore.Store{"local": local}
	layers := []storestack.Option{storestack.WithFallback(append([]fallback.Option{fallback.WithPolicy(policy), fallback.WithTimeout(s.RedisDeadline), fallback.WithLogger(log),
		fallback.WithName("redis"), fallback.WithLocalStore(local)}, fbOpts...)...)}
	if n := denyEntries(s, c, log); n > 0 {
		layers = append(layers, storestack.WithDenyCache(c.bus, denycache.WithMaxEntries(n), denycache.WithLogger(log)))
		o.describe += fmt.Sprintf(", deny cache of %d entries", n)
	}
	st, err := storestack.New(c.store, layers...)
	if err != nil {
		_ = o.Close()
		return nil, err
	}
	o.store, o.fallback, o.deny = st.Store, st.Fallback, st.DenyCache
	return o, nil
}

// denyEntries is the deny cache's size LOCAL_CACHE_SIZE_IN_BYTES asks for,
// 0 for none (unset, or a store without an invalidation bus).
func denyEntries(s *envsettings.Settings, c *redisClient, log *slog.Logger) int {
	if s.LocalCacheSizeInBytes <= 0 {
		return 0
	}
	if c.bus == nil {
		log.Warn("LOCAL_CACHE_SIZE_IN_BYTES ignored: this store has no invalidation bus")
		return 0
	}
	n := s.LocalCacheSizeInBytes / denyEntryBytes
	if n < minDenyEntries {
		// The reference's own tests set 1000 bytes; a cache that small
		// gets the deny cache's least size rather than a refusal.
		log.Info("LOCAL_CACHE_SIZE_IN_BYTES is below the deny cache's least size; using it", "bytes", s.LocalCacheSizeInBytes, "entries", minDenyEntries)
		n = minDenyEntries
	}
	return n
}

// openURL opens LIMITKIT_BACKEND_URL through backend/storeurl, which checks
// the connection at start and gives the deny cache's bus on the same
// client, with either library.
func openURL(ctx context.Context, s *envsettings.Settings) (*redisClient, error) {
	if strings.HasPrefix(strings.ToLower(s.BackendURL), "memory:") {
		return nil, errors.New("LIMITKIT_BACKEND_URL=memory:// : leave LIMITKIT_BACKEND_URL, REDIS_URL and BACKEND_TYPE unset (or BACKEND_TYPE=memory) for the in-memory store")
	}
	opts := []storeurl.Option{storeurl.WithClient(s.RedisClient)}
	if s.RedisPoolSize > 0 {
		opts = append(opts, storeurl.WithPoolSize(s.RedisPoolSize))
	}
	o, err := storeurl.Open(ctx, s.BackendURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("LIMITKIT_BACKEND_URL: %w", err)
	}
	return &redisClient{store: o.Store, bus: o.Bus, close: o.Close}, nil
}

func goRedis(c redis.UniversalClient) (*redisClient, error) {
	st, err := goredisstore.New(c)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	return &redisClient{store: st, bus: goredisstore.NewBus(c), close: c.Close}, nil
}

// openReference opens the store the reference's variables describe:
// REDIS_TYPE, REDIS_SOCKET_TYPE, REDIS_URL, REDIS_AUTH, REDIS_TLS and its
// files, REDIS_POOL_SIZE, REDIS_TIMEOUT.
func openReference(ctx context.Context, s *envsettings.Settings, log *slog.Logger) (*redisClient, error) {
	user, pass := splitAuth(s.RedisAuth)
	_, sentinelPass := splitAuth(s.RedisSentinelAuth)
	addrs, u, err := splitAddrs(s.RedisURL)
	if err != nil {
		return nil, err
	}
	if len(addrs) == 0 {
		return nil, errors.New("REDIS_URL is empty: write host:port (a comma list for REDIS_TYPE=CLUSTER, \"master,sentinel1,...\" for SENTINEL)")
	}
	if u.pass != "" && s.RedisAuth == "" {
		user, pass = u.user, u.pass
	}
	if u.tls {
		s.RedisTLS = true
	}
	tlsConf, err := redisTLS(s)
	if err != nil {
		return nil, err
	}
	var master string
	if s.RedisType == "SENTINEL" {
		if len(addrs) < 2 {
			return nil, errors.New("REDIS_TYPE=SENTINEL: write REDIS_URL as the master's name and the sentinels: mymaster,host1:26379,host2:26379")
		}
		master, addrs = addrs[0], addrs[1:]
	}
	if s.RedisSocketType == "unix" && s.RedisType != "SINGLE" {
		return nil, fmt.Errorf("REDIS_SOCKET_TYPE=unix works with REDIS_TYPE=SINGLE only; set REDIS_SOCKET_TYPE=tcp for %s", s.RedisType)
	}
	if s.RedisClient == "rueidis" {
		o := rueidis.ClientOption{InitAddress: addrs, Username: user, Password: pass, TLSConfig: tlsConf, ShuffleInit: true}
		o.Dialer.Timeout = s.RedisTimeout
		switch s.RedisType {
		case "SENTINEL":
			o.Sentinel = rueidis.SentinelOption{MasterSet: master, Password: sentinelPass, TLSConfig: tlsConf}
		case "SINGLE":
			o.ForceSingleClient = true
			if s.RedisSocketType == "unix" {
				path := addrs[0]
				o.DialCtxFn = func(ctx context.Context, _ string, d *net.Dialer, _ *tls.Config) (net.Conn, error) {
					return d.DialContext(ctx, "unix", path)
				}
			}
		}
		c, err := rueidis.NewClient(o)
		if err != nil {
			return nil, fmt.Errorf("rueidis could not connect to REDIS_URL: %w", err)
		}
		st, err := rueidisstore.New(c)
		if err != nil {
			c.Close()
			return nil, err
		}
		return &redisClient{store: st, bus: rueidisstore.NewBus(c), close: func() error { c.Close(); return nil }}, nil
	}
	t := s.RedisTimeout
	var c redis.UniversalClient
	switch s.RedisType {
	case "CLUSTER":
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Username: user, Password: pass, TLSConfig: tlsConf,
			PoolSize: s.RedisPoolSize, DialTimeout: t, ReadTimeout: t, WriteTimeout: t, ContextTimeoutEnabled: true})
	case "SENTINEL":
		c = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: addrs, SentinelPassword: sentinelPass,
			Username: user, Password: pass, TLSConfig: tlsConf, PoolSize: s.RedisPoolSize, DialTimeout: t, ReadTimeout: t, WriteTimeout: t,
			ContextTimeoutEnabled: true})
	default:
		c = redis.NewClient(&redis.Options{Network: s.RedisSocketType, Addr: addrs[0], Username: user, Password: pass,
			TLSConfig: tlsConf, PoolSize: s.RedisPoolSize, DialTimeout: t, ReadTimeout: t, WriteTimeout: t, ContextTimeoutEnabled: true})
	}
	if err := checkStart(ctx, c, s, log); err != nil {
		_ = c.Close()
		return nil, err
	}
	return goRedis(c)
}

// startCheckAttempts is how many times the check at start asks Redis
// before starting without it, as the reference retries its first
// connection.
const startCheckAttempts = 3

// checkStart asks Redis once it is opened, within REDIS_TIMEOUT per
// attempt. A refusal that no retry mends (a wrong REDIS_AUTH, REDIS_TLS
// against a plain server or the reverse, no permission to run scripts)
// fails the start with the cause. A Redis that does not answer is
// retried, then the service starts without it (limiting as
// LIMITKIT_ON_FAILURE says until it answers), with a warning.
func checkStart(ctx context.Context, c redis.UniversalClient, s *envsettings.Settings, log *slog.Logger) error {
	var err error
	for attempt := range startCheckAttempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Duration(attempt) * 100 * time.Millisecond):
			}
		}
		actx, cancel := context.WithTimeout(ctx, s.RedisTimeout)
		err = checkRedis(actx, c)
		cancel()
		if err == nil {
			return nil
		}
		if hint := refusal(err, s.RedisTLS); hint != "" {
			return fmt.Errorf("the Redis at REDIS_URL refused the connection: %w; %s", err, hint)
		}
		// A plain server stays silent before a TLS handshake: ask it in
		// plain text.
		if s.RedisTLS && s.RedisSocketType != "unix" && speaksPlain(ctx, c) {
			return fmt.Errorf("the Redis at REDIS_URL did not answer the TLS handshake (%w) but answers in plain text: set REDIS_TLS=false (or write redis:// instead of rediss://), or turn TLS on in the server", err)
		}
	}
	log.Warn("Redis does not answer at start; starting anyway, limiting by LIMITKIT_ON_FAILURE until it does", "attempts", startCheckAttempts, "err", err)
	return nil
}

// speaksPlain reports whether the first address c dials answers a plain
// PING (with a reply or an error such as NOAUTH) within a second.
func speaksPlain(ctx context.Context, c redis.UniversalClient) bool {
	var addr string
	switch o := c.(type) {
	case *redis.Client:
		addr = o.Options().Addr
	case *redis.ClusterClient:
		if addrs := o.Options().Addrs; len(addrs) > 0 {
			addr = addrs[0]
		}
	}
	if addr == "" {
		return false
	}
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	b := make([]byte, 1)
	n, _ := conn.Read(b)
	return n == 1 && (b[0] == '+' || b[0] == '-')
}

// checkRedis runs a read-only script on every master, as the stores'
// commands need (an ACL user may be allowed EVAL_RO and not PING).
func checkRedis(ctx context.Context, c redis.UniversalClient) error {
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.EvalRO(ctx, "return 1", nil).Err()
		})
	}
	return c.EvalRO(ctx, "return 1", nil).Err()
}

// refusal says what to change when err is one a retry does not mend, and
// "" when Redis may just be down or slow.
func refusal(err error, tlsOn bool) string {
	msg := err.Error()
	var rec tls.RecordHeaderError
	switch {
	case strings.Contains(msg, "WRONGPASS"):
		return "check REDIS_AUTH (user:password or the password alone)"
	case strings.Contains(msg, "NOAUTH"):
		return "the server requires a password: set REDIS_AUTH"
	case strings.Contains(msg, "without any password configured"):
		return "the server has no password: unset REDIS_AUTH, or set requirepass on the server"
	case strings.Contains(msg, "NOPERM"):
		return "the user may not run scripts (EVAL_RO and the stores' commands): grant them"
	case errors.As(err, &rec) || tlsOn && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || strings.HasSuffix(msg, ": EOF")):
		return "the server does not speak TLS: set REDIS_TLS=false, or turn TLS on in the server"
	case strings.Contains(msg, "x509:") || strings.Contains(msg, "tls:"):
		return "the TLS handshake failed: check REDIS_TLS_CACERT, the client certificate and the server's name (REDIS_TLS_SKIP_HOSTNAME_VERIFICATION)"
	case !tlsOn && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || strings.HasSuffix(msg, ": EOF")):
		return "the server closed the connection without a reply: if it speaks TLS only, set REDIS_TLS=true"
	}
	return ""
}

// splitAuth reads REDIS_AUTH as the reference does: "user:password" or a
// password alone.
func splitAuth(auth string) (user, pass string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
}

// urlAuth is what redis:// addresses in REDIS_URL carry besides the
// address.
type urlAuth struct {
	user, pass string
	tls        bool
}

// splitAddrs reads REDIS_URL's comma list. An entry may be host:port, a
// unix path, a sentinel master's name, or a redis:// or rediss:// URL
// (as the reference's client reads it), whose userinfo is the password
// (used when REDIS_AUTH is empty) and whose scheme rediss turns TLS on.
func splitAddrs(list string) ([]string, urlAuth, error) {
	var (
		out []string
		a   urlAuth
	)
	for _, p := range splitList(list) {
		lower := strings.ToLower(p)
		if !strings.HasPrefix(lower, "redis://") && !strings.HasPrefix(lower, "rediss://") {
			out = append(out, p)
			continue
		}
		u, err := url.Parse(p)
		if err != nil || u.Host == "" {
			return nil, a, fmt.Errorf("REDIS_URL entry %s is not a URL: write redis://[:PASSWORD@]host:port or host:port", redactURL(p))
		}
		out = append(out, u.Host)
		a.tls = a.tls || u.Scheme == "rediss"
		if pw, ok := u.User.Password(); ok {
			a.user, a.pass = u.User.Username(), pw
		} else if u.User != nil && u.User.Username() != "" {
			a.pass = u.User.Username() // redis://PASSWORD@host
		}
	}
	return out, a, nil
}

// redactList is REDIS_URL for a log line: each URL's userinfo hidden.
func redactList(list string) string {
	parts := splitList(list)
	for i, p := range parts {
		parts[i] = redactURL(p)
	}
	return strings.Join(parts, ",")
}

// redactURL hides the userinfo of a URL, even one url.Parse refuses.
func redactURL(p string) string {
	scheme, rest, ok := strings.Cut(p, "://")
	if !ok {
		return p
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		rest = "xxxxx@" + rest[at+1:]
	}
	return scheme + "://" + rest
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// redisTLS is REDIS_TLS's configuration: the system roots or
// REDIS_TLS_CACERT, a client certificate when both files are given.
func redisTLS(s *envsettings.Settings) (*tls.Config, error) {
	if !s.RedisTLS {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: s.RedisTLSSkipHostname} //nolint:gosec // the reference's REDIS_TLS_SKIP_HOSTNAME_VERIFICATION
	if s.RedisTLSCACert != "" {
		pem, err := os.ReadFile(s.RedisTLSCACert)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CACERT: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("REDIS_TLS_CACERT %s holds no PEM certificate", s.RedisTLSCACert)
		}
		c.RootCAs = pool
	}
	if (s.RedisTLSClientCert == "") != (s.RedisTLSClientKey == "") {
		return nil, errors.New("REDIS_TLS_CLIENT_CERT and REDIS_TLS_CLIENT_KEY go together: set both or neither")
	}
	if s.RedisTLSClientCert != "" {
		cert, err := tls.LoadX509KeyPair(s.RedisTLSClientCert, s.RedisTLSClientKey)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS_CLIENT_CERT/KEY: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
