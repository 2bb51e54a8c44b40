package main

// This file alone opens the store: LIMITKIT_BACKEND_URL through
// backend/storeurl, the reference's REDIS_* variables here.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/fallback"
	"github.com/limitkit/limitkit/rls/internal/settings"
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
// REDIS_* variables, or LIMITKIT_BACKEND_URL; a Redis store is wrapped in
// fallback (fbOpts add hooks) and, with LOCAL_CACHE_SIZE_IN_BYTES, in the
// deny cache, whose bus runs on the same client.
func openStore(ctx context.Context, s *settings.Settings, policy backend.FailurePolicy, log *slog.Logger, fbOpts ...fallback.Option) (*openedStore, error) {
	if s.Memory() {
		m, err := memorystore.New()
		if err != nil {
			return nil, err
		}
		if s.LocalCacheSizeInBytes > 0 {
			log.Warn("LOCAL_CACHE_SIZE_IN_BYTES ignored: the in-memory store answers denials in process already")
		}
		return &openedStore{store: m, describe: "memory (in process; set REDIS_URL, BACKEND_TYPE=redis or LIMITKIT_BACKEND_URL for a shared store)"}, nil
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
		c, err = openReference(ctx, s)
		desc = fmt.Sprintf("%s %s %s", strings.ToLower(s.RedisType), s.RedisSocketType, s.RedisURL)
	}
	if err != nil {
		return nil, err
	}
	o := &openedStore{closers: []func() error{c.close}, describe: fmt.Sprintf("redis (%s, %s)", desc, s.RedisClient)}
	fb, err := fallback.New(c.store, append([]fallback.Option{fallback.WithPolicy(policy), fallback.WithTimeout(s.RedisDeadline), fallback.WithLogger(log), fallback.WithName("redis")}, fbOpts...)...)
	if err != nil {
		_ = o.Close()
		return nil, fmt.Errorf("fallback: %w", err)
	}
	o.fallback, o.store = fb, fb
	if s.LocalCacheSizeInBytes > 0 {
		if c.bus == nil {
			log.Warn("LOCAL_CACHE_SIZE_IN_BYTES ignored: this store has no invalidation bus")
			return o, nil
		}
		n := s.LocalCacheSizeInBytes / denyEntryBytes
		if n < minDenyEntries {
			// The reference's own tests set 1000 bytes; a cache that small
			// gets the deny cache's least size rather than a refusal.
			log.Info("LOCAL_CACHE_SIZE_IN_BYTES is below the deny cache's least size; using it", "bytes", s.LocalCacheSizeInBytes, "entries", minDenyEntries)
			n = minDenyEntries
		}
		d, err := denycache.New(fb, c.bus, denycache.WithMaxEntries(n), denycache.WithLogger(log))
		if err != nil {
			_ = o.Close()
			return nil, fmt.Errorf("deny cache: %w", err)
		}
		o.deny, o.store = d, d
		o.describe += fmt.Sprintf(", deny cache of %d entries", n)
	}
	return o, nil
}

// openURL opens LIMITKIT_BACKEND_URL through backend/storeurl, which checks
// the connection at start and gives the deny cache's bus on the same
// client, with either library.
func openURL(ctx context.Context, s *settings.Settings) (*redisClient, error) {
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
func openReference(ctx context.Context, s *settings.Settings) (*redisClient, error) {
	tlsConf, err := redisTLS(s)
	if err != nil {
		return nil, err
	}
	user, pass := splitAuth(s.RedisAuth)
	_, sentinelPass := splitAuth(s.RedisSentinelAuth)
	addrs := splitList(s.RedisURL)
	if len(addrs) == 0 {
		return nil, errors.New("REDIS_URL is empty: write host:port (a comma list for REDIS_TYPE=CLUSTER, \"master,sentinel1,...\" for SENTINEL)")
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
	switch s.RedisType {
	case "CLUSTER":
		return goRedis(redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Username: user, Password: pass, TLSConfig: tlsConf,
			PoolSize: s.RedisPoolSize, DialTimeout: t, ReadTimeout: t, WriteTimeout: t, ContextTimeoutEnabled: true}))
	case "SENTINEL":
		return goRedis(redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: addrs, SentinelPassword: sentinelPass,
			Username: user, Password: pass, TLSConfig: tlsConf, PoolSize: s.RedisPoolSize, DialTimeout: t, ReadTimeout: t, WriteTimeout: t,
			ContextTimeoutEnabled: true}))
	}
	return goRedis(redis.NewClient(&redis.Options{Network: s.RedisSocketType, Addr: addrs[0], Username: user, Password: pass,
		TLSConfig: tlsConf, PoolSize: s.RedisPoolSize, DialTimeout: t, ReadTimeout: t, WriteTimeout: t, ContextTimeoutEnabled: true}))
}

// splitAuth reads REDIS_AUTH as the reference does: "user:password" or a
// password alone.
func splitAuth(auth string) (user, pass string) {
	if u, p, ok := strings.Cut(auth, ":"); ok {
		return u, p
	}
	return "", auth
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
func redisTLS(s *settings.Settings) (*tls.Config, error) {
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
