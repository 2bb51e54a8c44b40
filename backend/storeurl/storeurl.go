// Package storeurl opens a backend.Store from a URL, with the Redis client
// it needs, and checks at once that the store answers.
//
//	opened, err := storeurl.Open(ctx, os.Getenv("REDIS_URL"),
//		storeurl.WithClient(storeurl.Rueidis), storeurl.WithPassword(os.Getenv("REDIS_PASSWORD")))
//	if err != nil {
//		log.Fatal(err) // storeurl: TLS handshake with 10.0.0.5:6379: ...; this looks like TLS (rediss://) to a non-TLS server ...
//	}
//	defer opened.Close()
//	cached, err := denycache.New(opened.Store, opened.Bus) // optional: the deny cache, invalidated over the same client
//	lim, err := limiter.New(cached, cfg)
//
// # URLs
//
// The Redis URLs are read by the chosen client library's own parser, so
// every query option that library documents works (dial_timeout=2s,
// pool_size=20 with go-redis, ...):
//
//   - memory:// keeps the state in process (backend/memorystore);
//     memory://?max_keys=100000 bounds its keys.
//   - redis://[user:password@]host:port[/db] and rediss:// (TLS): one
//     server. go-redis: redis.ParseURL; rueidis: rueidis.ParseURL.
//   - redis+cluster://host1:port1?addr=host2:port2&addr=host3:port3 (and
//     rediss+cluster://): Redis Cluster, seeded with every address given.
//     go-redis: redis.ParseClusterURL; rueidis: rueidis.ParseURL.
//   - redis+sentinel://sentinel1:26379[/db]?addr=sentinel2:26379&master_name=mymaster
//     (and rediss+sentinel://): the master a group of sentinels monitors.
//     go-redis: redis.ParseFailoverURL, which reads the userinfo as the
//     sentinels' credentials and ?username=&password= as the master's;
//     rueidis: rueidis.ParseURL, with master_name passed as its master_set
//     and the userinfo used for the master.
//
// Both clients refuse query options they do not know (rueidis' own parser
// ignores them). The userinfo is checked before any parser sees the URL
// and is never handed to one, so no error holds any of it, however
// malformed the URL; RedactURL hides it for logs.
//
// Every rediss form takes tls_ca (the CA's PEM file), tls_cert and tls_key
// (a client certificate and its key) and tls_server_name (the name the
// server's certificate must hold), with both clients; errors name the one
// at fault. Each file is read when the URL is parsed and may hold at most
// MaxTLSFileSize bytes.
//
// # The check
//
// Open does not hand back a store that cannot work. Within the dial
// timeout (the URL's dial_timeout, WithDialTimeout, or the clients' 5 s)
// plus CheckMargin, it dials every node the client knows (for a sentinel
// URL, the sentinels and then the master they name), does the TLS
// handshake and authentication, and runs a read-only script there
// (EVAL_RO, which an ACL user of the stores may run, as PING it may not).
// A failure is an error with the reason: a TLS mismatch (rediss:// to a
// plain server, a certificate not signed by tls_ca, a client certificate
// refused), a wrong password or a password missing, an unknown sentinel
// master, no permission to run scripts, or no answer. A service thus fails
// at start with a reason instead of at its first request. A Redis that is
// down at start fails Open too, with or without a fallback around the
// store.
//
// The go-redis clients get ContextTimeoutEnabled, so that a fallback's
// deadline also ends the call inside the client.
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/denycache"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/rueidisstore"
	"github.com/limitkit/limitkit/internal/option"
)

// Client libraries for Redis, the values of WithClient.
const (
	GoRedis = "go-redis"
	Rueidis = "rueidis"
)

// Kind is the topology a URL names.
type Kind uint8

// The topologies.
const (
	Memory   Kind = iota // memory://
	Single               // redis://, rediss://
	Cluster              // redis+cluster://, rediss+cluster://
	Sentinel             // redis+sentinel://, rediss+sentinel://
)

// String names k as its URL scheme does.
func (k Kind) String() string {
	switch k {
	case Memory:
		return "memory"
	case Single:
		return "redis"
	case Cluster:
		return "redis+cluster"
	case Sentinel:
		return "redis+sentinel"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// CheckMargin is what Open's check may take beyond the dial timeout: the
// round trips after the dial, and the plain-text probe that explains a
// TLS handshake with a server without TLS.
const CheckMargin = time.Second

// Option configures Open and Parse. Options apply in order; a nil Option
// is ignored.
type Option func(*options) error

// options are what the Options set, over the defaults resolve gives.
type options struct {
	client             string
	username, password *string
	poolSize           int
	dialTimeout        time.Duration
	// The Redis store options, for each client's store.
	goRedis    []goredisstore.Option
	rueidis    []rueidisstore.Option
	storeNames []string // of the store options, for memory://'s error
}

// WithClient chooses the Redis client library: GoRedis (the default) or
// Rueidis. An empty name keeps the default.
func WithClient(name string) Option {
	return func(o *options) error {
		if name != "" {
			o.client = name
		}
		return nil
	}
}

// WithPassword sets the password of the Redis servers that hold the data
// (the server, the cluster's nodes, the sentinels' master), in place of the
// URL's: for a password kept apart from the URL (an environment variable,
// a secret file). An empty password is a password; leave the option out
// to keep the URL's.
func WithPassword(password string) Option {
	return func(o *options) error { o.password = &password; return nil }
}

// WithUsername sets the ACL user name that goes with the password, in
// place of the URL's.
func WithUsername(user string) Option {
	return func(o *options) error { o.username = &user; return nil }
}

// WithPoolSize sets go-redis' connection pool size per node (its
// PoolSize; default 10 per CPU), in place of the URL's pool_size. rueidis
// has no pool for what the stores send (it pipelines every call over its
// connection to each node), so with rueidis the option has no effect.
// Open refuses n < 0.
func WithPoolSize(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("WithPoolSize(%d): give at least 1, or leave it out for the client's default", n)
		}
		o.poolSize = n
		return nil
	}
}

// WithDialTimeout sets the clients' dial timeout (default 5 s, or the
// URL's dial_timeout), which also bounds Open's check (see the package
// doc). Open refuses d < 0.
func WithDialTimeout(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("WithDialTimeout(%v): give a positive duration, or leave it out for 5s", d)
		}
		o.dialTimeout = d
		return nil
	}
}

// WithServerTime makes the Redis store decide at the server's clock
// (goredisstore.WithServerTime). memory:// refuses it.
func WithServerTime() Option {
	return storeOption("WithServerTime", goredisstore.WithServerTime(), rueidisstore.WithServerTime())
}

// WithReplicaAck makes every admission wait for replicas
// (goredisstore.WithReplicaAck). Cluster URLs and memory:// refuse it.
func WithReplicaAck(replicas int, timeout time.Duration, onShort backend.OnShortAck) Option {
	return storeOption("WithReplicaAck", goredisstore.WithReplicaAck(replicas, timeout, onShort),
		rueidisstore.WithReplicaAck(replicas, timeout, onShort))
}

// WithBatching sets how many concurrent Takes may share one script call
// (goredisstore.WithBatching). memory:// refuses it.
func WithBatching(max int) Option {
	return storeOption("WithBatching", goredisstore.WithBatching(max), rueidisstore.WithBatching(max))
}

// storeOption records a Redis store option, named name, for both clients'
// stores.
func storeOption(name string, g goredisstore.Option, r rueidisstore.Option) Option {
	return func(o *options) error {
		o.goRedis = append(o.goRedis, g)
		o.rueidis = append(o.rueidis, r)
		o.storeNames = append(o.storeNames, name)
		return nil
	}
}

// redisOnly names the first option given that only a Redis URL takes.
func (o *options) redisOnly() string {
	if len(o.storeNames) > 0 {
		return o.storeNames[0]
	}
	return ""
}

// secrets are the credentials given as options, never printed.
func (o *options) secrets() []string {
	var s []string
	if o.password != nil {
		s = append(s, *o.password)
	}
	if o.username != nil {
		s = append(s, *o.username)
	}
	return s
}

func resolve(opts []Option) (*options, error) {
	o := &options{client: GoRedis}
	if err := option.Apply(o, opts); err != nil {
		return nil, err // Parse and Open wrap it in an *Error: "storeurl: "
	}
	return o, nil
}

// Error is what Parse or Open found wrong. Its message starts "storeurl: "
// and never holds the URL's userinfo or a password given as an option.
type Error struct {
	// Connect is false when the URL or an option is at fault (nothing was
	// dialled), true when the server was dialled and the check failed.
	Connect bool
	// Err says what is wrong and what to change.
	Err error
}

// Error returns "storeurl: " and the reason.
func (e *Error) Error() string { return "storeurl: " + e.Err.Error() }

// Unwrap returns the reason.
func (e *Error) Unwrap() error { return e.Err }

// Parse reads rawURL with opts as Open would, without contacting any
// server, and returns the topology it names. It reads the tls_ files.
func Parse(rawURL string, opts ...Option) (Kind, error) {
	o, err := resolve(opts)
	if err != nil {
		return 0, &Error{Err: err}
	}
	t, err := parse(rawURL, o)
	if err != nil {
		return 0, &Error{Err: err}
	}
	return t.kind, nil
}

// Opened is a store Open made, with what it made it over.
type Opened struct {
	// Store is the store: a *memorystore.Store, *goredisstore.Store or
	// *rueidisstore.Store.
	Store backend.Store
	// Bus carries a deny cache's invalidations over the same Redis client
	// (goredisstore.NewBus, rueidisstore.NewBus): pass it to denycache.New
	// with Store. Nil for memory://, whose state no other process shares
	// (denycache.New takes a nil Bus).
	Bus denycache.Bus
	// Kind is the topology the URL named.
	Kind Kind
	// Client is the client library, GoRedis or Rueidis; "" for memory://.
	Client string
	// GoRedis is the go-redis client (a *redis.ClusterClient for a cluster
	// URL, a *redis.Client otherwise), for tools that need the client
	// itself; nil unless Client is GoRedis. Close closes it.
	GoRedis redis.UniversalClient
	// Rueidis is the rueidis client; nil unless Client is Rueidis. Close
	// closes it.
	Rueidis rueidis.Client
}

// Close closes the Redis client Open made; the store must not be used
// after it. It returns nil for memory://.
func (o *Opened) Close() error {
	switch {
	case o.GoRedis != nil:
		return o.GoRedis.Close()
	case o.Rueidis != nil:
		o.Rueidis.Close()
	}
	return nil
}

// Open makes the store rawURL names (see the package doc for the URLs)
// with the client and options given, and checks that it answers (see The
// check); ctx bounds the whole. The caller closes the Opened.
func Open(ctx context.Context, rawURL string, opts ...Option) (*Opened, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Err: err}
	}
	o, err := resolve(opts)
	if err != nil {
		return nil, &Error{Err: err}
	}
	t, err := parse(rawURL, o)
	if err != nil {
		return nil, &Error{Err: err}
	}
	if t.kind == Memory {
		var mopts []memorystore.Option
		if t.maxKeys > 0 {
			mopts = append(mopts, memorystore.WithMaxKeys(t.maxKeys))
		}
		s, err := memorystore.New(mopts...)
		if err != nil {
			return nil, &Error{Err: err}
		}
		return &Opened{Store: s, Kind: Memory}, nil
	}
	secrets := append(secretsOf(rawURL, nil), o.secrets()...)
	if u, err := parseURL(rawURL); err == nil {
		secrets = append(secretsOf(rawURL, u), o.secrets()...)
	}
	cctx, cancel := context.WithTimeout(ctx, t.dialTimeout()+CheckMargin)
	defer cancel()
	op, err := t.open(cctx, o)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Err = scrubbed(e.Err, secrets)
			return nil, e
		}
		return nil, &Error{Connect: true, Err: scrubbed(err, secrets)}
	}
	return op, nil
}

// open makes the client and the store of a Redis target, and checks them.
func (t *target) open(ctx context.Context, o *options) (*Opened, error) {
	op := &Opened{Kind: t.kind, Client: t.client}
	var err error
	if t.client == Rueidis {
		c, cerr := rueidis.NewClient(t.rueidis)
		if cerr != nil {
			return nil, explain(fmt.Errorf("rueidis could not connect: %w", cerr), t, func() string { return sentinelProblem(ctx, t) })
		}
		op.Rueidis, op.Bus = c, rueidisstore.NewBus(c)
		if op.Store, err = rueidisstore.New(c, o.rueidis...); err != nil {
			err = &Error{Err: err}
		} else {
			err = checkRueidis(ctx, t, c)
		}
	} else {
		c := t.newGoRedis()
		op.GoRedis, op.Bus = c, goredisstore.NewBus(c)
		if op.Store, err = goredisstore.New(c, o.goRedis...); err != nil {
			err = &Error{Err: err}
		} else {
			err = checkGoRedis(ctx, t, c)
		}
	}
	if err != nil {
		_ = op.Close()
		return nil, err
	}
	return op, nil
}
