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
// Middleware for several limits can be stacked (per client, per route):
// each adds its own policy, named by WithPolicyName, to the same fields, as
// the draft's lists allow. The X-RateLimit-* fields hold one limit; the
// innermost middleware's wins. WithHeaders adds (or selects) the older
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset (seconds
// until the key's full allowance is back, or Retry-After when denied).
//
// The policy follows the limiter's configuration: after
// limiter.Limiter.SetConfig (or a configuration file's reload), responses
// describe the new limit, window and guard, and a change to or from
// "concurrency" switches between units and leases without failing a
// request in flight (limiter.Limiter.Admit decides both from one
// configuration).
//
// A limiter with a guard (limiter.Config.Guard) lists both policies, the
// guard's named after the main one with "-guard"; RateLimit describes the
// one the decision names (the denying one, or the one with least left).
//
// The limit's exemptions and deny list (limiter.Config.Exempt and Deny)
// cost no store call: an exempt request passes with no rate-limit fields, a
// deny-listed one is refused, 403 Forbidden by default (WithDenyListHandler).
// Their address entries apply only to keys a key func derived from the
// client's address (ClientIP, ProxiedClientIP, and IPv6Prefix, Join or
// FirstOf of them; see Key), never to a header's value.
//
// NewComposite serves a limiter.Composite and NewPlans a limiter.Plans the
// same way.
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
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/ratelimitfields"
	"github.com/limitkit/limitkit/limiter/transport"
)

// Headers selects which rate-limit header fields responses carry; combine
// them with |.
type Headers = transport.Headers

// The header sets.
const (
	// DraftHeaders are RateLimit-Policy and RateLimit, as in the IETF
	// httpapi draft. The default.
	DraftHeaders = transport.DraftHeaders
	// XRateLimitHeaders are X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset (seconds from now), for clients written against
	// them.
	XRateLimitHeaders = transport.XRateLimitHeaders
)

// DefaultPolicyName names the policy in the draft headers unless
// WithPolicyName says otherwise.
const DefaultPolicyName = transport.DefaultPolicyName

// ErrorHandler decides what happens to a request whose limit could not be
// decided because the store failed. It returns true to let the request
// through to the next handler, or false after writing a response itself.
type ErrorHandler func(w http.ResponseWriter, r *http.Request, err error) (serve bool)

// Middleware limits the requests of the handlers it wraps. It is safe for
// concurrent use; build it with New, NewComposite or NewPlans.
type Middleware struct {
	options
	core *transport.Core[*http.Request]
}

// New returns middleware enforcing lim. It returns an error for a nil
// limiter or an invalid option.
func New(lim *limiter.Limiter, opts ...Option) (*Middleware, error) {
	return build(opts, func(o *options) (*transport.Core[*http.Request], error) {
		return transport.ForLimiter(lim, o.key, o.set.PolicyName, problems)
	})
}

// NewPlans returns middleware enforcing, for each request, the plan p's
// resolver chooses for its key (limiter.Plans.Admit). Every plan's limit
// has its own headers, and they change with that plan's configuration.
func NewPlans(p *limiter.Plans, opts ...Option) (*Middleware, error) {
	return build(opts, func(o *options) (*transport.Core[*http.Request], error) {
		return transport.ForPlans(p, o.key, o.set.PolicyName, problems)
	})
}

// Limit is one limit of a limiter.Composite as NewComposite serves it.
type Limit struct {
	// Key keys the requests for this limit. Required.
	Key KeyFunc
	// Policy names the limit in the draft headers and in problem bodies;
	// printable ASCII, one name per limit. Required.
	Policy string
}

// NewComposite returns middleware enforcing the limits of c, all or
// nothing, limits[i] describing c's limit i. When one of c's limits is a
// concurrency limit, each request holds a lease (limiter.Composite.Admit)
// released as under New; otherwise it takes a unit of each. RateLimit-Policy
// lists every limit; RateLimit describes the one the decision names
// (limiter.Decision.Rule). The fields follow limiter.Composite.SetConfigs.
// WithKey and WithPolicyName do not apply (each Limit has its own).
func NewComposite(c *limiter.Composite, limits []Limit, opts ...Option) (*Middleware, error) {
	keys := make([]func(*http.Request) Key, len(limits))
	names := make([]string, len(limits))
	for i, l := range limits {
		keys[i], names[i] = l.Key, l.Policy
	}
	return build(opts, func(o *options) (*transport.Core[*http.Request], error) {
		o.set.PolicyName = transport.First(names, o.set.PolicyName)
		return transport.ForComposite(c, keys, names, problems)
	})
}

// build returns a Middleware with the defaults and opts applied, serving
// through the core newCore makes.
func build(opts []Option, newCore func(*options) (*transport.Core[*http.Request], error)) (*Middleware, error) {
	m := &Middleware{options: options{
		set:        transport.NewSettings(),
		key:        ClientIP(),
		denied:     http.HandlerFunc(tooManyRequests),
		missingKey: http.HandlerFunc(missingKey),
		deny:       http.HandlerFunc(forbidden),
	}}
	var err error
	if m.core, err = transport.Build("httplimit", &m.options, opts, newCore); err != nil {
		return nil, err
	}
	return m, nil
}

// problems makes a view's problem+json bodies, one per policy (the View's
// Extra).
func problems(v *transport.View) any {
	bodies := make([]string, len(v.Policies))
	for i, p := range v.Policies {
		bodies[i] = problemHead(p.Name)
	}
	return bodies
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

// DecisionFrom returns the decision the middleware made for the request
// whose context is ctx, for the handlers after it (and a WithDeniedHandler).
// ok is false when no decision was made: an exempt request, or one let
// through because the store failed. With stacked middleware the innermost
// one's decision is found.
func DecisionFrom(ctx context.Context) (d limiter.Decision, ok bool) {
	return transport.DecisionFrom(ctx)
}

// serve decides r, sets the headers and answers it unless it should go on
// to the next handler, with the request to pass on and, under a
// concurrency limit, the lease to release after it.
func (m *Middleware) serve(w http.ResponseWriter, r *http.Request) (*http.Request, *limiter.Lease, bool) {
	o := m.core.Admit(r.Context(), r)
	return m.answer(w, r, o)
}

// answer sets the headers of the admission o and answers r unless it
// should go on to the next handler (as serve); NewCost's middleware
// answers its reservations with it too.
func (m *Middleware) answer(w http.ResponseWriter, r *http.Request, o transport.Outcome) (*http.Request, *limiter.Lease, bool) {
	switch o.Verdict {
	case transport.Exempt:
		return r, o.Lease, true
	case transport.DenyListed:
		m.deny.ServeHTTP(w, r)
		return nil, nil, false
	case transport.NoKey:
		m.missingKey.ServeHTTP(w, r)
		return nil, nil, false
	case transport.Failed:
		if m.set.Headers&DraftHeaders != 0 && o.View != nil {
			w.Header().Add("RateLimit-Policy", o.View.Fields.Policy())
		}
		if m.onError == nil {
			m.logFailure(r, &o)
			return r, nil, true
		}
		return r, nil, m.onError(w, r, o.Err)
	}
	m.set.Fields(o.View, o.Decision, func(f ratelimitfields.Field, value string) {
		if f.Draft() {
			w.Header().Add(f.Name(), value) // stacked middleware each add a policy
		} else {
			w.Header().Set(f.Name(), value)
		}
	})
	r = r.WithContext(transport.WithDecision(r.Context(), &o))
	if o.Verdict == transport.Denied {
		w.Header().Set("Retry-After", strconv.FormatInt(RetryAfter(o.Decision.RetryAfter), 10))
		m.denied.ServeHTTP(w, r)
		return nil, nil, false
	}
	return r, o.Lease, true
}

// logFailure is what happens to a store failure without an ErrorHandler:
// it is logged and the request let through, since a store failure must not
// take the service down with it.
func (m *Middleware) logFailure(r *http.Request, o *transport.Outcome) {
	path := ""
	if r.URL != nil {
		path = r.URL.Path
	}
	m.set.LogFailure(r.Context(), o, "request let through", slog.String("method", r.Method), slog.String("path", path))
}

// RetryAfter converts a retry delay into the whole seconds of a Retry-After
// header: rounded up, at least 1 (a client told 0 would retry at once and
// be denied again).
func RetryAfter(d time.Duration) int64 {
	return ratelimitfields.RetryAfter(d)
}

// tooManyRequests is the default denied handler.
func tooManyRequests(w http.ResponseWriter, r *http.Request) {
	// The body depends on Accept: caches must not serve one for the other.
	w.Header().Add("Vary", "Accept")
	retry := w.Header().Get("Retry-After")
	v := transport.ViewFrom(r.Context())
	d, _ := DecisionFrom(r.Context())
	if v == nil || !acceptsJSON(r.Header.Values("Accept")) {
		http.Error(w, "429 too many requests: retry after "+retry+" s", http.StatusTooManyRequests)
		return
	}
	body := v.Extra.([]string)[v.Fields.Index(d)]
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
