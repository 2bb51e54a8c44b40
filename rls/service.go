package rls

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/clock"
)

// Service answers envoy.service.ratelimit.v3.RateLimitService on a
// backend.Store. It is safe for concurrent use; SetRules swaps its rules
// while calls are in flight (each call decides on the rules it started
// with).
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer

	store backend.Store
	rules atomic.Pointer[Rules]
	opts  options
	stats *statKeys
}

var _ rlsv3.RateLimitServiceServer = (*Service)(nil)

// Option configures New. Options apply in order; a nil Option is ignored.
type Option func(*options) error

// options are what the Options set, over the defaults New gives.
type options struct {
	shadow         bool
	quota          bool
	onFailure      backend.FailurePolicy
	errorOnFailure bool
	headers        *HeaderNames
	clock          clock.Clock
	stats          func(Stat)
	maxStatKeys    int
	nearRatio      float64
	prefix         string
	// charged are the domains charged after the response; all of them
	// with chargeAll (WithChargedDomains).
	charged   map[string]bool
	chargeAll bool
}

// chargedDomain reports whether domain's limits are charged after the
// response (WithChargedDomains).
func (o *options) chargedDomain(domain string) bool {
	return o.chargeAll || o.charged[domain]
}

// WithChargedDomains marks the domains whose limits are charged after the
// response (LIMITKIT_CHARGED_DOMAINS; "*" marks every domain): the token
// budgets of Envoy Gateway (cost.response) and Envoy AI Gateway
// (llmRequestCosts, QuotaPolicy), which check each request with
// hits_addend 0 and send the tokens on a second call when the stream ends.
// On such a limit a positive hits is a charge (backend.Request.Charge):
// recorded whatever is left, never refused, units beyond the limit kept as
// debt; and a check (hits 0) refuses a key with nothing left, where the
// reference refuses only one counted over its limit. Limits of
// concurrency, which cannot record a charge, keep the default. docs/rls.md says why a domain is the unit.
func WithChargedDomains(domains ...string) Option {
	return func(o *options) error {
		for _, d := range domains {
			switch d {
			case "":
				return fmt.Errorf("WithChargedDomains: an empty domain; name domains, or \"*\" for all")
			case "*":
				o.chargeAll = true
			default:
				if o.charged == nil {
					o.charged = map[string]bool{}
				}
				o.charged[d] = true
			}
		}
		return nil
	}
}

// HeaderNames are the response headers of WithResponseHeaders. An empty
// name takes the reference server's default.
type HeaderNames struct {
	// Limit defaults to "RateLimit-Limit" (LIMIT_LIMIT_HEADER).
	Limit string
	// Remaining defaults to "RateLimit-Remaining" (LIMIT_REMAINING_HEADER).
	Remaining string
	// Reset defaults to "RateLimit-Reset" (LIMIT_RESET_HEADER).
	Reset string
}

// WithShadowMode sets global shadow mode (the reference's SHADOW_MODE):
// every request is decided as if enforced, and the overall code is always
// OK; each descriptor's status still says OVER_LIMIT where it would.
func WithShadowMode(on bool) Option {
	return func(o *options) error { o.shadow = on; return nil }
}

// WithQuotaMode puts every limit in quota mode (the reference's
// QUOTA_MODE): a request is refused only when every limit it touches
// refuses it; each status still says OVER_LIMIT where its limit refused.
func WithQuotaMode(on bool) Option {
	return func(o *options) error { o.quota = on; return nil }
}

// WithFailurePolicy sets the policy for limits whose configuration names
// none (LIMITKIT_ON_FAILURE). Default backend.LocalPolicy(1): a fallback
// store goes on limiting in each instance. An unset policy is refused.
func WithFailurePolicy(p backend.FailurePolicy) Option {
	return func(o *options) error {
		if p.Mode() == backend.ModeUnset {
			return errors.New("WithFailurePolicy: the policy is unset; give local, local:N, fail_open or fail_closed")
		}
		o.onFailure = p
		return nil
	}
}

// WithErrorOnFailure restores the reference server's answer while its
// backend is down: a gRPC error (codes.Unavailable) for a request any of
// whose limits the store could not decide (a store error, or a degraded
// decision of package fallback). Envoy then applies its filter's
// failure_mode_deny. Off by default: each limit's policy answers.
func WithErrorOnFailure(on bool) Option {
	return func(o *options) error { o.errorOnFailure = on; return nil }
}

// WithResponseHeaders adds the reference server's rate limit headers to
// every response (LIMIT_RESPONSE_HEADERS_ENABLED): the limit, remaining
// and reset of the descriptor closest to its limit (or one that refused).
func WithResponseHeaders(names HeaderNames) Option {
	return func(o *options) error {
		n := names
		n.Limit = or(n.Limit, "RateLimit-Limit")
		n.Remaining = or(n.Remaining, "RateLimit-Remaining")
		n.Reset = or(n.Reset, "RateLimit-Reset")
		o.headers = &n
		return nil
	}
}

// WithClock sets the clock decisions are made at. Default clock.System.
func WithClock(c clock.Clock) Option {
	return func(o *options) error {
		if c == nil {
			return errors.New("WithClock: the clock is nil; pass a clock.Clock, or leave the option out for clock.System")
		}
		o.clock = c
		return nil
	}
}

// WithStats calls f once per limit decided (see Stat), synchronously: f
// must be quick and safe for concurrent use.
func WithStats(f func(Stat)) Option {
	return func(o *options) error { o.stats = f; return nil }
}

// WithMaxStatKeys bounds the distinct full keys detailed_metric rules
// report in Stat.Key (default 1000); past it, such a rule reports its
// rule key, as the others do.
func WithMaxStatKeys(n int) Option {
	return func(o *options) error {
		if n < 0 {
			return fmt.Errorf("WithMaxStatKeys: %d is negative; give 0 or more", n)
		}
		o.maxStatKeys = n
		return nil
	}
}

// WithNearLimitRatio sets the share of a limit past which an admitted
// request counts as near the limit (NEAR_LIMIT_RATIO). Default 0.8.
func WithNearLimitRatio(r float64) Option {
	return func(o *options) error {
		if !(r > 0 && r <= 1) {
			return fmt.Errorf("WithNearLimitRatio: %v is not in (0, 1]; give a share such as 0.8", r)
		}
		o.nearRatio = r
		return nil
	}
}

// WithKeyPrefix starts every key the service counts under
// (CACHE_KEY_PREFIX). Default "". It must not contain '{' or '}'.
func WithKeyPrefix(p string) Option {
	return func(o *options) error {
		k := backend.Key{Prefix: p, ID: "x"}
		if err := k.Validate(); err != nil {
			return fmt.Errorf("WithKeyPrefix: %w", err)
		}
		o.prefix = p
		return nil
	}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// New returns a service deciding on store under rules. rules may be nil:
// the service then answers every call with an error (codes.Unavailable)
// until SetRules gives it some, as the reference server does before its
// first configuration.
func New(store backend.Store, rules *Rules, opts ...Option) (*Service, error) {
	if store == nil {
		return nil, errors.New("rls: the store is nil")
	}
	o := options{onFailure: backend.LocalPolicy(1), clock: clock.System, maxStatKeys: 1000, nearRatio: 0.8}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("rls: %w", err)
		}
	}
	s := &Service{store: store, opts: o, stats: &statKeys{max: o.maxStatKeys}}
	s.rules.Store(rules)
	return s, nil
}

// SetRules swaps the service's rules atomically. Counts survive: keys
// name the domain, the request's entries and the limit's window and
// algorithm, not the configuration. A nil rules makes calls fail until
// the next SetRules.
func (s *Service) SetRules(r *Rules) { s.rules.Store(r) }

// Rules returns the rules in force (nil if none).
func (s *Service) Rules() *Rules { return s.rules.Load() }

// Register registers s on srv as envoy.service.ratelimit.v3.RateLimitService.
func Register(srv grpc.ServiceRegistrar, s *Service) {
	rlsv3.RegisterRateLimitServiceServer(srv, s)
}

// maxRememberedKey is the longest statistics key statKeys keeps as it is.
const maxRememberedKey = 256

// statKeys bounds the distinct detailed keys reported.
type statKeys struct {
	mu   sync.Mutex
	max  int
	seen map[string]struct{}
}

// admit reports whether key may be reported, remembering it (a long key
// by its hash, so that the set stays small whatever requests carry).
func (k *statKeys) admit(key string) bool {
	if len(key) > maxRememberedKey {
		sum := sha256.Sum256([]byte(key))
		key = string(sum[:])
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if _, ok := k.seen[key]; ok {
		return true
	}
	if len(k.seen) >= k.max {
		return false
	}
	if k.seen == nil {
		k.seen = map[string]struct{}{}
	}
	k.seen[key] = struct{}{}
	return true
}
