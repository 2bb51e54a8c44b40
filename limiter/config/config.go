// Package config builds a service's limiters from one file, so that limits
// are changed by editing configuration rather than code.
//
// A file, YAML or JSON, names the backend by URL and declares named
// policies, each a limiter.Config written with the same field names as
// limiter.Config's JSON:
//
//	backend:
//	  url: redis://127.0.0.1:6379/0   # or memory://, rediss://, redis+cluster://, redis+sentinel://
//	  client: rueidis                 # or go-redis (the default)
//	  fallback:                       # keep limiting while Redis is down (package fallback)
//	    timeout: 50ms
//	    on_failure: local:4
//	policies:
//	  login:
//	    algorithm: sliding_log
//	    limit: 5
//	    window: 15m
//	    on_failure: fail_open
//	  payment:
//	    limit: 10
//	    window: 1m
//	    on_failure: fail_closed
//	    guard: {limit: 100, window: 24h}
//
// One call reads it and one builds every limiter:
//
//	cfg, err := config.Load("limits.yaml")
//	if err != nil { ... } // limits.yaml:7: policies.login.window: "1 minute" is not a duration ...
//	set, err := cfg.Build(ctx)
//	if err != nil { ... }
//	defer set.Close()
//	login := set.Limiter("login")
//
// # Backend URLs
//
// The backend is opened by package backend/storeurl, which a program can
// also use without a file: its doc lists the URLs (memory://, redis://,
// rediss://, redis+cluster://, redis+sentinel://), their options, the
// tls_ files (at most storeurl.MaxTLSFileSize bytes each) and how no error
// holds the URL's password. Build checks the store (storeurl.Open): a
// wrong password, a TLS mismatch, an unknown sentinel master or a server
// that does not answer fails Build within the dial timeout, with the
// reason, with both clients.
//
// deny_cache: {max_entries, probe_interval, channel} on the backend puts a
// deny cache (backend/denycache) in front of the store, invalidated over
// the store's own Redis client; with a fallback section the stack is
// fallback(denycache(store)).
//
// # Policies
//
// A policy's fields and their defaults are limiter.Config's: algorithm
// (sliding_log), limit and window (required), prefix, on_failure and guard
// (limit, window, algorithm fixed_window, on_failure). Its prefix defaults
// to limiter.DefaultPrefix + name + ":", so "login" keeps its keys under
// "limitkit:login:"; two policies may not share a prefix.
//
// # HTTP
//
// A policy's optional http block configures the net/http middleware
// Set.HTTP builds for it (package httplimit), so that a service
// configured by file keys and answers requests as one configured in code:
//
//	policies:
//	  api:
//	    limit: 100
//	    window: 1m
//	    http:
//	      key: [header:X-API-Key, ip]   # the first found; "ip+route" is both at once
//	      headers: both                 # draft (default), x_ratelimit, both, none
//	      policy_name: public-api       # in the headers; default: the policy's name
//	  uploads:
//	    algorithm: concurrency
//	    limit: 2
//	    window: 30s
//	    http:
//	      key: proxied_ip
//	      trusted_proxies: [10.0.0.0/8]
//	      proxy_header: X-Forwarded-For # the default
//	      ipv6_prefix: 64
//	      release_timeout: 2s
//	      on_error: refuse              # 503 while the store cannot decide; default serve
//
//	mw, err := set.HTTP("api") // extra httplimit options go after the file's
//	mux.Handle("GET /items", mw.Handler(items))
//
// The keys are ip, proxied_ip (with trusted_proxies), route (the ServeMux
// pattern: mount the middleware inside the mux), header:NAME and
// query:NAME; HTTP lists what each field does. A concurrency policy holds
// a lease per request until its handler returns. Set.HTTPPlans serves
// plans whose policies share one http block. Reload applies a new limit
// to the middleware already built, and refuses a file whose http block
// changed: the middleware keeps its key and headers until a restart.
//
// # Errors
//
// Every problem in a file is reported as an *Error that names the file, the
// line and the field, such as
//
//	limits.yaml:7: policies.login.window: "1 minute" is not a duration; write it like "1m", "90s" or "500ms"
//
// and wraps limiter.ErrInvalidConfig. Unknown fields are errors, so a typo
// does not silently leave a default in force, and a name close to a valid
// one gets a suggestion ("did you mean ..."). A file's problems are
// reported at once: several come as an *Errors, one per line, up to
// MaxErrors.
package config

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/storeurl"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/configtree"
	"github.com/limitkit/limitkit/limiter/configtree/yamltree"
)

// Format is the syntax of a configuration file.
type Format string

// The formats Parse reads.
const (
	YAML Format = "yaml"
	JSON Format = "json"
)

// Client libraries for Redis, the values of backend.client.
const (
	GoRedis = storeurl.GoRedis
	Rueidis = storeurl.Rueidis
)

// Config is a parsed configuration file: the backend and the policies. It
// can also be written in Go and built the same way.
type Config struct {
	// Backend says where limiter state lives.
	Backend Backend
	// Policies are the named limits, in file order.
	Policies []Policy
	// Adaptive are the adaptive concurrency limits (the adaptive block),
	// in file order; AdaptiveLimiter builds them.
	Adaptive []Adaptive

	// file and lines locate fields for error messages; empty for a Config
	// written in Go.
	file  string
	lines map[string]int
	// typos are the fields an unknown field looked like, which are then
	// not reported missing as well.
	typos map[string]bool
}

// Policy is one named limit.
type Policy struct {
	// Name identifies the limiter in Set.Limiter. It may hold letters,
	// digits and "_-.:/".
	Name string
	// Config is the limit; an empty Prefix becomes
	// limiter.DefaultPrefix + Name + ":".
	Config limiter.Config
	// HTTP, when set, configures the middleware Set.HTTP builds for the
	// policy (the file's http block); nil is httplimit's defaults.
	HTTP *HTTP
}

// Backend is the store the policies share.
type Backend struct {
	// URL names the store: memory://, redis://, rediss://,
	// redis+cluster:// or redis+sentinel:// (see the package doc).
	// Required.
	URL string
	// Client is the Redis client library, GoRedis (default) or Rueidis.
	Client string
	// ServerTime makes the Redis scripts decide at the server's clock
	// (goredisstore.WithServerTime). Default false: the limiter's clock.
	ServerTime bool
	// ReplicaAck, when set, makes each admission wait for replicas
	// (goredisstore.WithReplicaAck). Not for cluster URLs.
	ReplicaAck *ReplicaAck
	// Batch is how many concurrent Takes may travel together in one script
	// call (goredisstore.WithBatching): 0 keeps the stores' default
	// (goredisstore.DefaultBatch), 1 sends each alone.
	Batch int
	// DenyCache, when set, answers repeated denials in process
	// (denycache.New), invalidated across processes over the store's own
	// Redis client (its pub/sub). Default: none.
	DenyCache *DenyCache
	// Fallback, when set, wraps the Redis store (and its deny cache) with
	// fallback.New so that limiting goes on while Redis is unavailable.
	Fallback *Fallback
}

// DenyCache configures denycache.New; zero fields keep its defaults.
type DenyCache struct {
	// MaxEntries bounds the denials remembered (default
	// denycache.DefaultMaxEntries; at least 64).
	MaxEntries int
	// ProbeInterval is how often the cache checks its subscription
	// (default denycache.DefaultProbeInterval).
	ProbeInterval time.Duration
	// Channel is the pub/sub channel of the invalidations (default
	// denycache.DefaultChannel); every process sharing the store must
	// use the same.
	Channel string
}

// String describes b for logs with the URL's userinfo redacted (see
// storeurl.RedactURL), so that printing a Config never prints a password.
func (b Backend) String() string {
	s := fmt.Sprintf("{URL:%s Client:%s ServerTime:%v Batch:%d", storeurl.RedactURL(b.URL), b.client(), b.ServerTime, b.Batch)
	if b.ReplicaAck != nil {
		s += fmt.Sprintf(" ReplicaAck:%+v", *b.ReplicaAck)
	}
	if b.DenyCache != nil {
		s += fmt.Sprintf(" DenyCache:%+v", *b.DenyCache)
	}
	if b.Fallback != nil {
		s += fmt.Sprintf(" Fallback:%+v", *b.Fallback)
	}
	return s + "}"
}

// GoString is String, for %#v.
func (b Backend) GoString() string { return "config.Backend" + b.String() }

// ReplicaAck is the replica acknowledgement an admission waits for.
type ReplicaAck struct {
	// Replicas is how many replicas must acknowledge. Required, at least 1.
	Replicas int
	// Timeout bounds the wait. Required.
	Timeout time.Duration
	// OnShort is "deny" (default: give the units back and deny) or
	// "admit" (admit, marked Unconfirmed) when fewer replicas acknowledged.
	OnShort string
}

// Fallback configures fallback.New; zero fields keep its defaults.
type Fallback struct {
	// Timeout bounds each Redis call (default fallback.DefaultTimeout).
	Timeout time.Duration
	// FailureThreshold is the number of consecutive failure events that
	// opens the breaker (default fallback.DefaultFailureThreshold; see
	// fallback.WithFailureThreshold).
	FailureThreshold int
	// OpenTimeout is how long the breaker stays open before probing
	// (default fallback.DefaultOpenTimeout).
	OpenTimeout time.Duration
	// Probes is the number of half-open probes (default
	// fallback.DefaultProbes).
	Probes int
	// OnFailure is the policy of limits that set none (default "local").
	OnFailure backend.FailurePolicy
}

// Error is what is wrong with a configuration, and where. It wraps
// limiter.ErrInvalidConfig and, when there is one, the underlying cause.
type Error struct {
	// File is the file's path; empty for Parse.
	File string
	// Line is the 1-based line of the offending value; 0 when unknown.
	Line int
	// Field is the dotted path of the field, e.g. "policies.login.window";
	// empty for syntax errors.
	Field string
	// Err says what is wrong.
	Err error
}

// Error formats e as "file:line: field: problem".
func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", e.File, e.Line)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "line %d: ", e.Line)
	}
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	msg := "invalid"
	if e.Err != nil {
		// The field says where: drop the prefix of package limiter's
		// errors, or the rule sentinel's of a rule checked here.
		msg = strings.TrimPrefix(e.Err.Error(), "limiter: ")
		msg = strings.TrimPrefix(msg, limiter.ErrInvalidConfig.Error()+": ")
	}
	b.WriteString(msg)
	return b.String()
}

// Unwrap returns limiter.ErrInvalidConfig and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{limiter.ErrInvalidConfig}
	}
	return []error{limiter.ErrInvalidConfig, e.Err}
}

// Load reads and validates the file at path; its extension picks the format
// (.json is JSON, anything else YAML). Errors name the file and the line.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parse(data, formatOf(path), path)
}

// formatOf is the format Load reads path in.
func formatOf(path string) Format {
	if strings.EqualFold(filepath.Ext(path), ".json") {
		return JSON
	}
	return YAML
}

// Parse reads and validates a configuration in format. Errors name the
// line ("line 7: policies.login.window: ...").
func Parse(data []byte, format Format) (*Config, error) {
	return parse(data, format, "")
}

func parse(data []byte, format Format, file string) (*Config, error) {
	var (
		root *configtree.Node
		err  error
	)
	switch format {
	case YAML:
		root, err = yamltree.Parse(data, configtree.FileLimits)
	case JSON:
		root, err = configtree.ParseJSON(data)
	default:
		err = &Error{Err: fmt.Errorf("unknown format %q; use %q or %q", clip(string(format), 24), YAML, JSON)}
	}
	err = fileError(err)
	if err == nil {
		cfg := &Config{file: file, lines: map[string]int{}, typos: map[string]bool{}}
		l := &errorList{}
		cfg.decode(root, l)
		cfg.validate(l)
		if err = l.err(); err == nil {
			return cfg, nil
		}
	}
	var e *Error
	if errors.As(err, &e) && e.File == "" {
		e.File = file
	}
	setFile(err, file)
	return nil, err
}

// MaxErrors is how many problems Parse, Load and Validate report at most;
// Errors.Omitted counts the rest.
const MaxErrors = 20

// Errors is every problem of a configuration, up to MaxErrors, in the
// order of the file. Parse, Load and Validate return it when there is more
// than one problem (a single one is returned as its *Error); errors.As
// finds the first *Error, errors.Is limiter.ErrInvalidConfig.
type Errors struct {
	// Errs are the problems, by line.
	Errs []*Error
	// Omitted is how many more problems there were.
	Omitted int
}

// Error lists the problems one per line.
func (e *Errors) Error() string {
	var b strings.Builder
	for i, err := range e.Errs {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(err.Error())
	}
	if e.Omitted > 0 {
		fmt.Fprintf(&b, "\n... and %d more problems", e.Omitted)
	}
	return b.String()
}

// Unwrap returns the problems.
func (e *Errors) Unwrap() []error {
	out := make([]error, len(e.Errs))
	for i, err := range e.Errs {
		out[i] = err
	}
	return out
}

// errorList collects the problems of a configuration. A field with a
// problem is not checked again: a limit that is not a number is not also
// reported as missing.
type errorList struct {
	errs []*Error
	more int
}

// maxCollected bounds what a hostile file can make errorList hold.
const maxCollected = 1000

func (l *errorList) add(err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = &Error{Err: err}
	}
	if l.has(e.Field) && e.Field != "" {
		return
	}
	if len(l.errs) >= maxCollected {
		l.more++
		return
	}
	l.errs = append(l.errs, e)
}

// has reports whether field, a field inside it or a field it is inside
// has a problem already.
func (l *errorList) has(field string) bool {
	for _, e := range l.errs {
		if related(e.Field, field) {
			return true
		}
	}
	return false
}

func related(a, b string) bool {
	if len(a) > len(b) {
		a, b = b, a
	}
	return a != "" && strings.HasPrefix(b, a) && (len(a) == len(b) || b[len(a)] == '.')
}

// err returns nil, the one problem, or an *Errors of all, by line (those
// without a line last).
func (l *errorList) err() error {
	switch len(l.errs) {
	case 0:
		return nil
	case 1:
		return l.errs[0]
	}
	errs := slices.Clone(l.errs)
	slices.SortStableFunc(errs, func(a, b *Error) int {
		key := func(e *Error) int {
			if e.Line == 0 {
				return math.MaxInt
			}
			return e.Line
		}
		return cmp.Compare(key(a), key(b))
	})
	out := &Errors{Errs: errs, Omitted: l.more}
	if len(errs) > MaxErrors {
		out.Errs, out.Omitted = errs[:MaxErrors], l.more+len(errs)-MaxErrors
	}
	return out
}

// setFile names file in every problem of err that names none.
func setFile(err error, file string) {
	var es *Errors
	if errors.As(err, &es) {
		for _, e := range es.Errs {
			if e.File == "" {
				e.File = file
			}
		}
	}
}

// Policy returns the policy named name.
func (c *Config) Policy(name string) (limiter.Config, bool) {
	for _, p := range c.Policies {
		if p.Name == name {
			return p.Config, true
		}
	}
	return limiter.Config{}, false
}

// fieldError returns an Error for field, at the line the file gave it.
func (c *Config) fieldError(field string, err error) *Error {
	return &Error{File: c.file, Line: c.fieldLine(field), Field: field, Err: err}
}
