// Package limiter is the API services call to rate-limit.
//
// A Limiter enforces one limit, such as 100 requests per minute per user, on
// a backend.Store that keeps the counts: backend/memorystore in process, or
// a Redis store shared by every instance of a service. The Config chooses the
// algorithm by name:
//
//   - "sliding_log" (the default): exact; memory per key grows with the
//     limit (at most algorithms.MaxSlidingLogLimit).
//   - "sliding_counter": two weighted fixed windows; constant memory,
//     approximate (never under-counts).
//   - "fixed_window": one counter per window; cheapest, but admits up to
//     twice the limit across a window boundary.
//
// Typical use:
//
//	store, _ := memorystore.New()
//	lim, err := limiter.New(store, limiter.Config{Limit: 100, Window: time.Minute, Prefix: "api:"})
//	if err != nil { ... } // the error says what to fix in the config
//	d, err := lim.Allow(ctx, userID)
//	if err != nil { ... } // the store failed (or the key was empty)
//	if !d.Allowed { ... } // reject; d.RetryAfter says when to come back
//
// AllowN takes several units at once, all or nothing. Peek reports without
// consuming. Reset forgets a key. Wait blocks until a request is admitted.
//
// A denial is a Decision with Allowed false, never an error. Errors mean the
// request could not be decided: bad input (errors.Is ErrInvalidRequest) or a
// failing store.
//
// The limiter reads its clock once per call and passes the time to the store,
// so a fake clock (WithClock) drives every decision in tests. A Limiter is
// safe for concurrent use; its zero value is not usable, use New.
package limiter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
)

// Errors reported for bad input; test with errors.Is.
var (
	// ErrInvalidConfig reports a Config that New cannot use.
	ErrInvalidConfig = algorithms.ErrInvalidRule
	// ErrInvalidRequest reports a call that cannot be decided: an empty
	// key or a cost outside 1..Limit.
	ErrInvalidRequest = algorithms.ErrInvalidRequest
)

// DefaultPrefix is the key prefix of a Config that sets none.
const DefaultPrefix = "limitkit:"

// Config describes one limit. In JSON, the window is a duration string:
//
//	{"algorithm": "sliding_counter", "limit": 100, "window": "1m", "prefix": "api:"}
type Config struct {
	// Algorithm is "sliding_log" (default), "sliding_counter" or
	// "fixed_window".
	Algorithm algorithms.Name `json:"algorithm,omitempty"`
	// Limit is the number of units admitted per Window. Required, 1 to
	// 2^53 (10,000 for sliding_log).
	Limit int64 `json:"limit"`
	// Window is the period of the limit. Required, a whole number of
	// milliseconds up to 366 days.
	Window time.Duration `json:"window"`
	// Prefix namespaces this limit's keys in the store; give each limit
	// sharing a store its own. Default DefaultPrefix. It must not contain
	// '{' or '}'.
	Prefix string `json:"prefix,omitempty"`
}

// configJSON is Config as written in JSON.
type configJSON struct {
	Algorithm algorithms.Name `json:"algorithm,omitempty"`
	Limit     int64           `json:"limit"`
	Window    string          `json:"window"`
	Prefix    string          `json:"prefix,omitempty"`
}

// UnmarshalJSON reads a Config, with the window as a duration string such as
// "1m" or "500ms". Unknown fields are errors, so that typos do not pass
// silently.
func (c *Config) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var j configJSON
	if err := dec.Decode(&j); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field == "window" {
			return fmt.Errorf("%w: window must be a duration string such as \"1m\" or \"500ms\": %w", ErrInvalidConfig, err)
		}
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	var w time.Duration
	if j.Window != "" {
		var err error
		if w, err = time.ParseDuration(j.Window); err != nil {
			return fmt.Errorf("%w: window %q: write it as a duration such as \"1m\" or \"500ms\": %w", ErrInvalidConfig, j.Window, err)
		}
	}
	*c = Config{Algorithm: j.Algorithm, Limit: j.Limit, Window: w, Prefix: j.Prefix}
	return nil
}

// MarshalJSON writes a Config with the window as a duration string.
func (c Config) MarshalJSON() ([]byte, error) {
	return json.Marshal(configJSON{Algorithm: c.Algorithm, Limit: c.Limit, Window: c.Window.String(), Prefix: c.Prefix})
}

// withDefaults returns c with its empty fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Algorithm == "" {
		c.Algorithm = algorithms.SlidingLog
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	return c
}

// Validate reports whether New would accept c, and if not, what to change.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := c.rule().Validate(); err != nil {
		return err
	}
	if err := (backend.Key{Prefix: c.Prefix, ID: "-"}).Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

func (c Config) rule() algorithms.Rule {
	return algorithms.Rule{Algorithm: c.Algorithm, Limit: c.Limit, Window: c.Window}
}

// Option configures a Limiter.
type Option func(*Limiter)

// WithClock makes the limiter read time from c instead of the system clock.
// When c is a clock.Timer (clock.Fake is), Wait also waits on it.
func WithClock(c clock.Clock) Option {
	return func(l *Limiter) {
		if c != nil {
			l.clock = c
		}
	}
}

// Decision is the outcome of a call: whether the request was admitted, the
// limit, the remaining allowance, when to retry and when the key is free
// again, and whether a fallback made it.
type Decision = backend.Result

// Limiter enforces one Config on a Store.
type Limiter struct {
	store  backend.Store
	config Config
	rule   algorithms.Rule
	clock  clock.Clock
}

// New returns a limiter for cfg on store, or an error wrapping
// ErrInvalidConfig that says what to change.
func New(store backend.Store, cfg Config, opts ...Option) (*Limiter, error) {
	if store == nil {
		return nil, fmt.Errorf("%w: store is nil; pass a backend.Store such as memorystore.New()", ErrInvalidConfig)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{store: store, config: cfg, rule: cfg.rule(), clock: clock.System}
	for _, opt := range opts {
		opt(l)
	}
	return l, nil
}

// Config returns the limiter's configuration, defaults filled in.
func (l *Limiter) Config() Config { return l.config }

// Allow decides one request for key and, if admitted, counts it.
func (l *Limiter) Allow(ctx context.Context, key string) (Decision, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides a request of n units for key: all n are admitted and
// counted, or none. n must be between 1 and the limit.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Decision, error) {
	req, err := l.request(key, n)
	if err != nil {
		return Decision{}, err
	}
	return l.store.Take(ctx, req)
}

// Peek reports what Allow would decide for key now, without counting
// anything. Its Remaining is the allowance before the request.
func (l *Limiter) Peek(ctx context.Context, key string) (Decision, error) {
	req, err := l.request(key, 1)
	if err != nil {
		return Decision{}, err
	}
	return l.store.Peek(ctx, req)
}

// Reset forgets what was counted for key, giving it its full allowance.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if key == "" {
		return fmt.Errorf("%w: key is empty", ErrInvalidRequest)
	}
	return l.store.Reset(ctx, backend.Key{Prefix: l.config.Prefix, ID: key}, l.rule)
}

// Wait blocks until one request for key is admitted, and returns that
// decision. See WaitN.
func (l *Limiter) Wait(ctx context.Context, key string) (Decision, error) {
	return l.WaitN(ctx, key, 1)
}

// minWait bounds how often WaitN retries a denial that gives no retry time
// (a fallback failing closed).
const minWait = 10 * time.Millisecond

// WaitN blocks until a request of n units for key is admitted, sleeping for
// each denial's RetryAfter, and returns the admitting decision. It returns
// an error when ctx ends first, or at once, wrapping
// context.DeadlineExceeded, when the next retry would come after ctx's
// deadline. Other callers can take the allowance while it sleeps; WaitN
// does not reserve it.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) (Decision, error) {
	for {
		d, err := l.AllowN(ctx, key, n)
		if err != nil || d.Allowed {
			return d, err
		}
		wait := max(d.RetryAfter, minWait)
		if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
			return d, fmt.Errorf("limiter: waiting %v for %q would pass the context deadline: %w", wait, key, context.DeadlineExceeded)
		}
		select {
		case <-ctx.Done():
			return d, fmt.Errorf("limiter: wait for %q: %w", key, ctx.Err())
		case <-clock.After(l.clock, wait):
		}
	}
}

func (l *Limiter) request(key string, n int64) (backend.Request, error) {
	if key == "" {
		return backend.Request{}, fmt.Errorf("%w: key is empty", ErrInvalidRequest)
	}
	if err := l.rule.ValidateCost(n); err != nil {
		return backend.Request{}, err
	}
	return backend.Request{
		Key:  backend.Key{Prefix: l.config.Prefix, ID: key},
		Rule: l.rule,
		Now:  l.clock.Now(),
		Cost: n,
	}, nil
}
