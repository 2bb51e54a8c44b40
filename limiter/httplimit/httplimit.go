// Package httplimit is net/http middleware that rate-limits requests with a
// limiter.Limiter and tells clients where they stand.
//
//	lim, _ := limiter.New(store, limiter.Config{Limit: 100, Window: time.Minute, Prefix: "crawl:"})
//	mw, err := httplimit.New(lim) // keyed by client IP (RemoteAddr) by default
//	if err != nil { ... }
//	http.ListenAndServe(addr, mw.Handler(mux))
//
// Each request is keyed by a KeyFunc (ClientIP, ProxiedClientIP,
// IPv6Prefix, Header, FromContext, Route, combined with Join or FirstOf) and
// takes one unit of the limiter's allowance for that key. An admitted
// request goes on to the next handler, which finds the decision with
// DecisionFrom; a denied one gets 429 Too Many Requests with Retry-After in
// whole seconds, rounded up and at least 1, and a body that is
// application/problem+json (the draft's quota-exceeded problem type) when
// the client's Accept header asks for JSON, plain text otherwise.
//
// Every decided response carries the RateLimit-Policy and RateLimit fields
// of the IETF httpapi draft, revision draft-ietf-httpapi-ratelimit-headers-11
// (23 May 2026), both structured-field Lists of Items whose value is the
// policy name as a String:
//
//	RateLimit-Policy: "default";q=100;w=60
//	RateLimit: "default";r=0;t=37
//
// In RateLimit-Policy, q is the limit and w the window in seconds (rounded
// up). In RateLimit, r is the quota available now and t the draft's
// "effective window": the seconds within which the client can use no more
// than r. The middleware sends the longest true one, the time until more
// quota becomes available, rounded up, and sends it only when the decision
// tells it exactly: on every denial (then it equals Retry-After) and on
// admissions under the fixed_window and gcra algorithms. An admission under
// a log or sliding_counter algorithm gets no t (the parameter is optional):
// its quota comes back entry by entry, and the decision does not say when
// the next one leaves.
//
// A limiter whose algorithm is "concurrency" bounds the requests in flight
// instead: each admitted request holds a lease (limiter.Limiter.Acquire)
// until its handler returns, whether it finished, panicked (the panic goes
// on after the release) or stopped because the client went away. The
// release runs without the request's cancellation, under a timeout of its
// own (WithReleaseTimeout); a lease that could not be released comes back
// when it times out (the limit's Window). A handler that may outlive the
// lease timeout renews its lease (LeaseFrom). The policy carries the
// draft's quota unit and no window, and RateLimit no t (a lease may be
// released at any moment; Retry-After is when the oldest held lease times
// out, at the latest):
//
//	RateLimit-Policy: "uploads";q=2;qu="concurrent-requests"
//	RateLimit: "uploads";r=0
//
// NewComposite serves a limiter.Composite, such as a rate limit and a
// concurrency limit taken together, all or nothing.
//
// Middleware for several limits can be stacked (per client, per route):
// each adds its own policy, named by WithPolicyName, to the same fields, as
// the draft's lists allow. The X-RateLimit-* fields hold one limit; the
// innermost middleware's wins. WithHeaders adds (or selects) the older
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (seconds
// until the key's full allowance is back, or Retry-After when denied).
//
// The policy follows the limiter's configuration: after
// limiter.Limiter.SetConfig (or a configuration file's reload), responses
// describe the new limit, window and guard.
//
// A limiter with a guard (limiter.Config.Guard) lists both policies, the
// guard's named after the main one with "-guard"; RateLimit describes the
// one the decision names (the denying one, or the one with least left).
//
// Exemptions (WithExemptKeys, WithExemptAddrs) are never limited and cost no
// store call; deny lists (WithDenyKeys, WithDenyAddrs) are always refused,
// 403 Forbidden by default.
//
// Failures never become 500s by default: when the store cannot decide (Redis
// down and no fallback store), the error is logged with log/slog and the
// request is let through; WithErrorHandler changes that. Decisions a
// fallback store made while its primary was down (Degraded) are served like
// any other, headers included, except that an admission by a fallback
// failing open, which counted nothing, gets RateLimit-Policy but no
// RateLimit field (r=0 would tell clients to stop). A request that yields no key is answered 400
// Bad Request by default (WithMissingKey): letting it through would let
// clients escape the limit by omitting the header that names them.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/ratelimitfields"
)

// Headers selects which rate-limit header fields responses carry; combine
// them with |.
type Headers uint8

// The header sets.
const (
	// DraftHeaders are RateLimit-Policy and RateLimit, as in the IETF
	// httpapi draft. The default.
	DraftHeaders Headers = 1 << iota
	// XRateLimitHeaders are X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (seconds from now), for clients written against
	// them.
	XRateLimitHeaders
)

// DefaultPolicyName names the policy in the draft headers unless
// WithPolicyName says otherwise.
const DefaultPolicyName = "default"

// ErrorHandler decides what happens to a request whose limit could not be
// decided because the store failed. It returns true to let the request
// through to the next handler, or false after writing a response itself.
type ErrorHandler func(w http.ResponseWriter, r *http.Request, err error) (serve bool)

// Option configures a Middleware.
type Option func(*Middleware) error

// WithKey sets how requests are keyed (default ClientIP()).
func WithKey(k KeyFunc) Option {
	return func(m *Middleware) error {
		if k == nil {
			return errors.New("httplimit: key func is nil")
		}
		m.key = k
		return nil
	}
}

// WithPolicyName names the policy in the draft headers (default
// DefaultPolicyName). Give each limit its own name when one response can
// carry several. The name must be printable ASCII.
func WithPolicyName(name string) Option {
	return func(m *Middleware) error {
		if err := ratelimitfields.CheckName(name); err != nil {
			return fmt.Errorf("httplimit: %w", err)
		}
		m.policyName = name
		return nil
	}
}

// WithHeaders selects the header fields sent (default DraftHeaders). 0
// sends none but Retry-After.
func WithHeaders(h Headers) Option {
	return func(m *Middleware) error {
		if h&^(DraftHeaders|XRateLimitHeaders) != 0 {
			return fmt.Errorf("httplimit: unknown header set %#x", uint8(h))
		}
		m.headers = h
		return nil
	}
}

// WithErrorHandler sets what happens when the store fails (default: log
// with the middleware's logger and let the request through).
func WithErrorHandler(h ErrorHandler) Option {
	return func(m *Middleware) error {
		if h == nil {
			return errors.New("httplimit: error handler is nil")
		}
		m.onError = h
		return nil
	}
}

// WithDeniedHandler sets the handler that answers denied requests. The
// rate-limit headers and Retry-After are set, and the decision is in the
// request's context (DecisionFrom), before it runs; it must write the status
// itself (default: 429 with a problem+json body for clients that accept
// JSON, a short text body for others).
func WithDeniedHandler(h http.Handler) Option {
	return func(m *Middleware) error {
		if h == nil {
			return errors.New("httplimit: denied handler is nil")
		}
		m.denied = h
		return nil
	}
}

// WithMissingKey sets the handler that answers requests for which the key
// func finds no key (default: 400 with a short text body). To limit such
// requests by another key instead, use FirstOf in WithKey.
func WithMissingKey(h http.Handler) Option {
	return func(m *Middleware) error {
		if h == nil {
			return errors.New("httplimit: missing-key handler is nil")
		}
		m.missingKey = h
		return nil
	}
}

// WithLogger sets the logger of the default error handler (default
// slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(m *Middleware) error {
		if l == nil {
			return errors.New("httplimit: logger is nil")
		}
		m.logger = l
		return nil
	}
}

// Middleware limits the requests of the handlers it wraps. It is safe for
// concurrent use; build it with New.
type Middleware struct {
	lim        *limiter.Limiter
	comp       *limiter.Composite // instead of lim, from NewComposite
	compKeys   []KeyFunc          // the key of each of comp's limits
	key        KeyFunc
	policyName string
	headers    Headers
	onError    ErrorHandler
	denied     http.Handler
	missingKey http.Handler
	logger     *slog.Logger
	lists      lists

	// releaseTimeout bounds a lease's release (WithReleaseTimeout);
	// releaseHook, when set (by tests' controls), releases instead.
	releaseTimeout time.Duration
	releaseHook    func(*http.Request, *limiter.Lease) error

	// view is derived from the limiter's configuration, and made again
	// when that changes (limiter.Limiter.SetConfig).
	view atomic.Pointer[view]
}

// New returns middleware enforcing lim. It returns an error for a nil
// limiter or an invalid option.
func New(lim *limiter.Limiter, opts ...Option) (*Middleware, error) {
	if lim == nil {
		return nil, errors.New("httplimit: limiter is nil; build one with limiter.New")
	}
	m := newMiddleware()
	m.lim = lim
	if err := m.apply(opts); err != nil {
		return nil, err
	}
	m.current()
	return m, nil
}

// newMiddleware returns a Middleware with the defaults.
func newMiddleware() *Middleware {
	m := &Middleware{
		key:            ClientIP(),
		policyName:     DefaultPolicyName,
		headers:        DraftHeaders,
		missingKey:     http.HandlerFunc(missingKey),
		logger:         slog.Default(),
		lists:          lists{deny: http.HandlerFunc(forbidden)},
		releaseTimeout: DefaultReleaseTimeout,
	}
	m.denied = http.HandlerFunc(m.tooManyRequests)
	return m
}

// apply applies opts and fills in what depends on them.
func (m *Middleware) apply(opts []Option) error {
	for _, opt := range opts {
		if err := opt(m); err != nil {
			return err
		}
	}
	if m.onError == nil {
		m.onError = m.logAndServe
	}
	return nil
}

// Handler returns next wrapped by the limit. Under a concurrency limit the
// lease is released when next returns or panics (the panic goes on after
// the release).
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, lease, ok := m.serve(w, r)
		if !ok {
			return
		}
		if lease != nil {
			// A deferred call runs on return and while panicking alike.
			defer m.release(r, lease)
		}
		next.ServeHTTP(w, r)
	})
}

// decisionKey is the context key of the decision; a type of its own so no
// other package's key can collide with it.
type decisionKey struct{}

// DecisionFrom returns the decision the middleware made for the request
// whose context is ctx, for the handlers after it (and a WithDeniedHandler).
// ok is false when no decision was made: an exempt request, or one let
// through because the store failed. With stacked middleware the innermost
// one's decision is found.
func DecisionFrom(ctx context.Context) (d limiter.Decision, ok bool) {
	if c, ok := ctx.Value(decisionKey{}).(*decisionCtx); ok {
		return c.d, true
	}
	return limiter.Decision{}, false
}

// decisionCtx carries the decision (and the lease, under a concurrency
// limit): one allocation, where context.WithValue would take two (its node
// and the boxed Decision).
type decisionCtx struct {
	context.Context
	d     limiter.Decision
	lease *limiter.Lease
}

// Value answers decisionKey with the context itself and passes every other
// key to the parent.
func (c *decisionCtx) Value(key any) any {
	if _, ok := key.(decisionKey); ok {
		return c
	}
	return c.Context.Value(key)
}

// serve decides r, sets the headers and answers it unless it should go on
// to the next handler, with the request to pass on and, under a
// concurrency limit, the lease to release after it.
func (m *Middleware) serve(w http.ResponseWriter, r *http.Request) (*http.Request, *limiter.Lease, bool) {
	key, verdict := m.lists.check(r, m.key)
	switch verdict {
	case exempt:
		return r, nil, true
	case deny:
		m.lists.deny.ServeHTTP(w, r)
		return nil, nil, false
	}
	if key == "" {
		m.missingKey.ServeHTTP(w, r)
		return nil, nil, false
	}
	v := m.current()
	d, lease, err := m.decide(r, key, v)
	if err != nil {
		if errors.Is(err, limiter.ErrInvalidRequest) {
			m.missingKey.ServeHTTP(w, r)
			return nil, nil, false
		}
		if m.headers&DraftHeaders != 0 {
			w.Header().Add("RateLimit-Policy", v.fields.Policy())
		}
		return r, nil, m.onError(w, r, err)
	}
	// The limit's own lists (limiter.Config.Exempt and Deny) answer like
	// the middleware's: an exempt request passes without rate-limit
	// fields, a listed one gets the deny handler, not a 429.
	switch {
	case d.Exempt:
		return r, lease, true
	case d.DenyListed && !d.Allowed:
		m.lists.deny.ServeHTTP(w, r)
		return nil, nil, false
	}
	m.setHeaders(w.Header(), v, d)
	r = r.WithContext(&decisionCtx{r.Context(), d, lease})
	if !d.Allowed {
		w.Header().Set("Retry-After", strconv.FormatInt(RetryAfter(d.RetryAfter), 10))
		m.denied.ServeHTTP(w, r)
		return nil, nil, false
	}
	return r, lease, true
}

// decide takes a unit (or a lease) for the request keyed key.
func (m *Middleware) decide(r *http.Request, key string, v *view) (limiter.Decision, *limiter.Lease, error) {
	switch {
	case m.comp != nil:
		return m.decideComposite(r, key, v)
	case v.lease:
		lease, d, err := m.lim.Acquire(r.Context(), key)
		return d, lease, err
	}
	d, err := m.lim.AllowN(r.Context(), key, 1)
	return d, nil, err
}

// setHeaders writes the rate-limit fields of d.
func (m *Middleware) setHeaders(h http.Header, v *view, d limiter.Decision) {
	if m.headers == 0 {
		return
	}
	// A fallback failing open that counted nothing gets no RateLimit:
	// r=0 would tell clients to stop (ratelimitfields.Counted).
	v.fields.Fields(d, m.headers&DraftHeaders != 0, m.headers&XRateLimitHeaders != 0, func(f ratelimitfields.Field, value string) {
		if f.Draft() {
			h.Add(f.Name(), value) // stacked middleware each add a policy
		} else {
			h.Set(f.Name(), value)
		}
	})
}

// logAndServe is the default ErrorHandler: a store failure must not take the
// service down with it.
func (m *Middleware) logAndServe(_ http.ResponseWriter, r *http.Request, err error) bool {
	level := slog.LevelError
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		level = slog.LevelDebug // the client went away; nothing failed
	}
	path := ""
	if r.URL != nil {
		path = r.URL.Path
	}
	m.logger.Log(r.Context(), level, "limitkit: rate limit not decided; request let through",
		"policy", m.current().policyLabel, "method", r.Method, "path", path, "error", err)
	return true
}

// RetryAfter converts a retry delay into the whole seconds of a Retry-After
// header: rounded up, at least 1 (a client told 0 would retry at once and
// be denied again).
func RetryAfter(d time.Duration) int64 {
	return ratelimitfields.RetryAfter(d)
}

// tooManyRequests is the default denied handler.
func (m *Middleware) tooManyRequests(w http.ResponseWriter, r *http.Request) {
	// The body depends on Accept: caches must not serve one for the other.
	w.Header().Add("Vary", "Accept")
	retry := w.Header().Get("Retry-After")
	if !acceptsJSON(r.Header.Values("Accept")) {
		http.Error(w, "429 too many requests: retry after "+retry+" s", http.StatusTooManyRequests)
		return
	}
	v := m.current()
	body := v.problem[0]
	if d, ok := DecisionFrom(r.Context()); ok {
		body = v.problem[v.fields.Index(d)]
	}
	h := w.Header()
	h.Del("Content-Length")
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = io.WriteString(w, body+`"retry after `+retry+` s"}`+"\n")
}

func forbidden(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "403 forbidden: this client may not use this service", http.StatusForbidden)
}

func missingKey(w http.ResponseWriter, _ *http.Request) {
	http.Error(w, "400 bad request: the request does not say who is making it (no rate limit key)", http.StatusBadRequest)
}
