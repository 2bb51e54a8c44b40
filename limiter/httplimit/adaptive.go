package httplimit

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/limitkit/limitkit/limiter/adaptive"
)

// ServiceOverloaded is the problem type (RFC 9457) of a request refused
// by an adaptive limit: the service, not the client's quota, is full.
const ServiceOverloaded = "https://github.com/limitkit/limitkit/blob/main/docs/adaptive.md#service-overloaded"

// AdaptiveOption configures NewAdaptive. Options apply in order; a nil
// one is ignored.
type AdaptiveOption func(*adaptiveOptions) error

type adaptiveOptions struct {
	priority func(*http.Request) adaptive.Priority
	perKey   *Middleware
	retry    time.Duration
	refused  http.Handler
}

// WithPriority sets how a request's class is read (default: every request
// is adaptive.Default). PriorityHeader reads it from a header; set one
// only for callers you trust, or every client will call itself critical.
func WithPriority(f func(*http.Request) adaptive.Priority) AdaptiveOption {
	return func(o *adaptiveOptions) error {
		if f == nil {
			return errors.New("WithPriority: the func is nil; pass one, or leave the option out")
		}
		o.priority = f
		return nil
	}
}

// PriorityHeader returns a priority func that reads the class from the
// header name ("critical", "default", "sheddable"); a missing or unknown
// value is adaptive.Default.
func PriorityHeader(name string) func(*http.Request) adaptive.Priority {
	return func(r *http.Request) adaptive.Priority {
		p, _ := adaptive.ParsePriority(r.Header.Get(name))
		return p
	}
}

// WithPerClient puts the per-client middleware m in front of the adaptive
// limit, in one handler: m decides first, so that a client over its own
// limit is refused (429) before it takes a slot of the concurrency the
// whole service shares, and one abusive client cannot fill the service.
func WithPerClient(m *Middleware) AdaptiveOption {
	return func(o *adaptiveOptions) error {
		if m == nil {
			return errors.New("WithPerClient: the middleware is nil; build one with httplimit.New")
		}
		o.perKey = m
		return nil
	}
}

// WithOverloadRetryAfter sets the Retry-After of a refused request
// (default 1 s; whole seconds, at least 1).
func WithOverloadRetryAfter(d time.Duration) AdaptiveOption {
	return func(o *adaptiveOptions) error {
		if d <= 0 {
			return fmt.Errorf("WithOverloadRetryAfter: the delay is %v; give a positive duration", d)
		}
		o.retry = d
		return nil
	}
}

// WithOverloadHandler sets the handler that answers refused requests
// (default: 503 Service Unavailable with Retry-After and a problem+json
// body for clients that accept JSON, a short text body for others).
// Retry-After is set before it runs.
func WithOverloadHandler(h http.Handler) AdaptiveOption {
	return func(o *adaptiveOptions) error {
		if h == nil {
			return errors.New("WithOverloadHandler: the handler is nil; pass one, or leave the option out")
		}
		o.refused = h
		return nil
	}
}

// AdaptiveMiddleware bounds the requests the handlers it wraps serve at
// once by an adaptive.Limiter. Build it with NewAdaptive; it is safe for
// concurrent use.
type AdaptiveMiddleware struct {
	lim *adaptive.Limiter
	o   adaptiveOptions
}

// NewAdaptive returns middleware that admits each request through lim (a
// slot held until the handler returns or panics) and answers a refused one
// 503 Service Unavailable: the service is overloaded, whoever asks, so a
// client should retry later or elsewhere, unlike a 429 for its own quota.
//
// The slot's latency feeds lim's law: a handler that returns is a
// success; a request whose context ended first (its deadline, or the
// client going away, which under overload is mostly a client's timeout)
// is a drop, its latency a lower bound. Ignoring those would freeze the
// limit exactly when every request times out. It returns an error for a nil limiter or an invalid option.
func NewAdaptive(lim *adaptive.Limiter, opts ...AdaptiveOption) (*AdaptiveMiddleware, error) {
	if lim == nil {
		return nil, errors.New("httplimit: adaptive limiter is nil; build one with adaptive.New")
	}
	m := &AdaptiveMiddleware{lim: lim, o: adaptiveOptions{
		priority: func(*http.Request) adaptive.Priority { return adaptive.Default },
		retry:    time.Second,
		refused:  http.HandlerFunc(overloaded),
	}}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&m.o); err != nil {
			return nil, fmt.Errorf("httplimit: %w", err)
		}
	}
	return m, nil
}

// Handler returns next wrapped by the per-client limit (WithPerClient),
// then the adaptive one.
func (m *AdaptiveMiddleware) Handler(next http.Handler) http.Handler {
	h := http.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, err := m.lim.Acquire(r.Context(), m.o.priority(r))
		if err != nil {
			if r.Context().Err() != nil {
				return // the client is gone: nobody to answer
			}
			w.Header().Set("Retry-After", strconv.FormatInt(RetryAfter(m.o.retry), 10))
			m.o.refused.ServeHTTP(w, r)
			return
		}
		if r.Context().Err() != nil {
			tok.OnIgnore() // gone while it waited: its latency says nothing
			return
		}
		defer func() {
			// A deferred call runs on return and while panicking alike.
			if r.Context().Err() != nil {
				tok.OnDropped()
			} else {
				tok.OnSuccess()
			}
		}()
		next.ServeHTTP(w, r)
	}))
	if m.o.perKey != nil {
		h = m.o.perKey.Handler(h)
	}
	return h
}

// overloaded is the default handler of refused requests.
func overloaded(w http.ResponseWriter, r *http.Request) {
	w.Header().Add("Vary", "Accept")
	retry := w.Header().Get("Retry-After")
	if !acceptsJSON(r.Header.Values("Accept")) {
		http.Error(w, "503 service unavailable: overloaded, retry after "+retry+" s", http.StatusServiceUnavailable)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, `{"type":"`+ServiceOverloaded+`","title":"Service Overloaded","status":503,"detail":"retry after `+retry+` s"}`+"\n")
}

// ThrottleTransport returns a RoundTripper that sends requests through
// next (http.DefaultTransport when nil) unless t refuses them locally,
// with an error wrapping adaptive.ErrThrottled. A response other than 429
// or 503 is counted as accepted (an error of the application is an
// accept: the backend had room for it); those two and transport errors
// are not.
func ThrottleTransport(t *adaptive.Throttle, next http.RoundTripper) (http.RoundTripper, error) {
	if t == nil {
		return nil, errors.New("httplimit: throttle is nil; build one with adaptive.NewThrottle")
	}
	if next == nil {
		next = http.DefaultTransport
	}
	return &throttled{t: t, next: next}, nil
}

type throttled struct {
	t    *adaptive.Throttle
	next http.RoundTripper
}

func (tt *throttled) RoundTrip(r *http.Request) (*http.Response, error) {
	if !tt.t.Allow() {
		if r.Body != nil {
			_ = r.Body.Close() // a RoundTripper closes the body, even on error
		}
		return nil, fmt.Errorf("%s %s: %w", r.Method, r.URL.Host, adaptive.ErrThrottled)
	}
	resp, err := tt.next.RoundTrip(r)
	if err == nil && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		tt.t.Accepted()
	}
	return resp, err
}
