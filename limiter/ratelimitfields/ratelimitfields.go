// Package ratelimitfields formats the rate-limit fields a limiter's
// decisions are reported with, whatever the transport: the RateLimit-Policy
// and RateLimit fields of the IETF httpapi draft
// (draft-ietf-httpapi-ratelimit-headers-11) and the older X-RateLimit-Limit,
// X-RateLimit-Remaining and X-RateLimit-Reset. limiter/httplimit sends them
// as HTTP header fields, limiter/grpclimit as response metadata; both take
// the values from here, so the two always agree.
//
// A Policy holds what depends only on the limiter's configuration; make it
// again when the configuration changes (limiter.Limiter.Generation):
//
//	p := ratelimitfields.NewPolicy("default", lim.Config())
//	p.Policy()    // "default";q=100;w=60
//	p.RateLimit(d) // "default";r=0;t=37
//
// A limiter with a guard (limiter.Config.Guard) has two policies, the
// guard's named after the main one with "-guard"; the per-decision values
// describe the one the decision names. NewCompositePolicy describes the
// limits of a limiter.Composite the same way, one named policy per limit.
//
// A concurrency limit (algorithm "concurrency") counts requests in flight:
// its policy has the draft's quota unit and no window, and its RateLimit
// no t, since a held lease may be released at any moment:
//
//	"uploads";q=2;qu="concurrent-requests"
//	"uploads";r=0
//
// The package uses the standard library only, besides limitkit's core.
package ratelimitfields

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/limiter"
)

// GuardSuffix is appended to the policy name to name the guard's policy.
const GuardSuffix = "-guard"

// ConcurrentRequests is the draft's quota unit (the "qu" parameter) of a
// concurrency limit: q counts requests in flight, not requests per window.
const ConcurrentRequests = "concurrent-requests"

// Policy is the configuration-derived part of the fields for one limiter
// configuration. It is immutable and safe for concurrent use.
type Policy struct {
	// items are the policies: a Limiter's main limit and its guard, or a
	// composite's limits in order.
	items     []item
	composite bool   // items are indexed by Decision.Rule
	policy    string // RateLimit-Policy value
}

// item is one policy of a Policy.
type item struct {
	name  string // quoted
	limit string // X-RateLimit-Limit value
	rule  algorithms.Rule
}

// NewPolicy describes cfg under the policy name (printable ASCII; see
// CheckName).
func NewPolicy(name string, cfg limiter.Config) *Policy {
	p := &Policy{items: []item{newItem(name, algorithms.Rule{Algorithm: cfg.Algorithm, Limit: cfg.Limit, Window: cfg.Window})}}
	if g := cfg.Guard; g != nil {
		// The guard is a policy of its own, named after the main one.
		p.items = append(p.items, newItem(name+GuardSuffix, algorithms.Rule{Algorithm: g.Algorithm, Limit: g.Limit, Window: g.Window}))
	}
	p.policy = p.list()
	return p
}

// NewCompositePolicy describes the limits of a limiter.Composite, cfgs,
// under names[i] each (printable ASCII; see CheckName). RateLimit-Policy
// lists them all; a decision's values describe the limit it names
// (Decision.Rule). It returns an error unless there is one name per limit.
func NewCompositePolicy(names []string, cfgs []limiter.Config) (*Policy, error) {
	if len(names) != len(cfgs) || len(cfgs) == 0 {
		return nil, fmt.Errorf("%d policy names for %d limits; give one name per limit", len(names), len(cfgs))
	}
	p := &Policy{composite: true}
	for i, cfg := range cfgs {
		if err := CheckName(names[i]); err != nil {
			return nil, fmt.Errorf("limit %d: %w", i, err)
		}
		p.items = append(p.items, newItem(names[i], algorithms.Rule{Algorithm: cfg.Algorithm, Limit: cfg.Limit, Window: cfg.Window}))
	}
	p.policy = p.list()
	return p, nil
}

func newItem(name string, rule algorithms.Rule) item {
	return item{name: Quote(name), limit: strconv.FormatInt(rule.Limit, 10), rule: rule}
}

// list is the RateLimit-Policy value: the items in order.
func (p *Policy) list() string {
	var b strings.Builder
	for i, it := range p.items {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(policyItem(it))
	}
	return b.String()
}

// IsLease reports whether rule is a concurrency limit (its algorithm
// holds leases), whose quota is requests in flight (ConcurrentRequests) and
// whose window is the lease timeout, not a quota window.
func IsLease(rule algorithms.Rule) bool { return rule.HoldsLeases() }

// policyItem is one RateLimit-Policy list member: q is the limit, w the
// window in whole seconds, rounded up and at least 1. A concurrency limit
// has qu="concurrent-requests" and no w: its window is how long a lease
// lasts if its holder never releases it, not a period its quota is
// allocated over, and the draft's w is optional.
func policyItem(it item) string {
	if IsLease(it.rule) {
		return it.name + ";q=" + it.limit + `;qu="` + ConcurrentRequests + `"`
	}
	return it.name + ";q=" + it.limit + ";w=" + strconv.FormatInt(max(Seconds(it.rule.Window), 1), 10)
}

// Policy returns the RateLimit-Policy field value: the main policy, then
// the guard's when there is one.
func (p *Policy) Policy() string { return p.policy }

// Limit returns the X-RateLimit-Limit value of the main rule (a
// composite's first), the one to send when a decision counted nothing (see
// Counted).
func (p *Policy) Limit() string { return p.items[0].limit }

// HasGuard reports whether the configuration has a guard.
func (p *Policy) HasGuard() bool { return !p.composite && len(p.items) > 1 }

// IsGuard reports whether d was decided by the guard's policy (the guard
// denied, or it has the least left), so its values describe the guard.
func (p *Policy) IsGuard(d limiter.Decision) bool {
	return d.Rule == limiter.GuardRule && p.HasGuard()
}

// Lease reports whether d was decided by a concurrency limit (see
// IsLease).
func (p *Policy) Lease(d limiter.Decision) bool { return IsLease(p.pick(d).rule) }

// Index returns the place in RateLimit-Policy of the policy d describes:
// the guard's (1) when IsGuard, a composite's limit by Decision.Rule, else
// the main one (0).
func (p *Policy) Index(d limiter.Decision) int {
	switch {
	case p.composite && d.Rule >= 0 && d.Rule < len(p.items):
		return d.Rule
	case p.IsGuard(d):
		return 1
	}
	return 0
}

// pick returns the policy d describes (see Index).
func (p *Policy) pick(d limiter.Decision) *item { return &p.items[p.Index(d)] }

// Field is one of the rate-limit fields.
type Field uint8

// The fields, in the order Fields reports them.
const (
	// PolicyField is RateLimit-Policy (draft).
	PolicyField Field = iota
	// RateLimitField is RateLimit (draft).
	RateLimitField
	// XLimitField is X-RateLimit-Limit.
	XLimitField
	// XRemainingField is X-RateLimit-Remaining.
	XRemainingField
	// XResetField is X-RateLimit-Reset.
	XResetField
)

var (
	names      = [...]string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
	lowerNames = [...]string{"ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}
)

// Name returns the field's name in canonical HTTP form, "RateLimit-Policy".
func (f Field) Name() string { return names[f] }

// LowerName returns the field's name in lower case, as gRPC metadata
// keys are written: "ratelimit-policy".
func (f Field) LowerName() string { return lowerNames[f] }

// Draft reports whether f is one of the draft's fields, which are Lists:
// stacked limits each add a member, where an X-RateLimit field holds one
// limit.
func (f Field) Draft() bool { return f <= RateLimitField }

// Fields calls set with each field to send for d, in Field order: the
// draft's fields when draft is true, the X-RateLimit fields when xRateLimit
// is. A decision that counted nothing (see Counted) gets only
// RateLimit-Policy and X-RateLimit-Limit.
func (p *Policy) Fields(d limiter.Decision, draft, xRateLimit bool, set func(f Field, value string)) {
	if !Counted(d) {
		if draft {
			set(PolicyField, p.policy)
		}
		if xRateLimit {
			set(XLimitField, p.pick(d).limit)
		}
		return
	}
	if draft {
		set(PolicyField, p.policy)
		set(RateLimitField, p.RateLimit(d))
	}
	if xRateLimit {
		limit, remaining, reset := p.XRateLimit(d)
		set(XLimitField, limit)
		set(XRemainingField, remaining)
		set(XResetField, reset)
	}
}

// Counted reports whether d reports a current limit. It is false for an
// admission by a fallback failing open, which counted nothing: send
// Policy and Limit only, since r=0 would tell clients to stop.
func Counted(d limiter.Decision) bool {
	return !(d.Degraded && d.Allowed && d.Remaining == 0 && d.ResetAfter == 0)
}

// RateLimit returns the RateLimit field value of d: the decided policy's
// name, r, the quota available now, and t, the effective window, when d
// tells it exactly (see EffectiveWindow).
func (p *Policy) RateLimit(d limiter.Decision) string {
	name := p.pick(d).name
	r := strconv.FormatInt(max(d.Remaining, 0), 10)
	if t, ok := p.EffectiveWindow(d); ok {
		return name + ";r=" + r + ";t=" + strconv.FormatInt(t, 10) // one allocation
	}
	return name + ";r=" + r
}

// XRateLimit returns the X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset values of d. Reset keeps its own meaning: when
// admitted, the seconds until the key's full allowance is back; when
// denied, the retry delay (RetryAfter).
func (p *Policy) XRateLimit(d limiter.Decision) (limit, remaining, reset string) {
	limit = p.pick(d).limit
	if p.IsGuard(d) {
		limit = strconv.FormatInt(d.Limit, 10)
	}
	remaining = strconv.FormatInt(max(d.Remaining, 0), 10)
	if d.Allowed {
		reset = strconv.FormatInt(Seconds(d.ResetAfter), 10)
	} else {
		reset = strconv.FormatInt(RetryAfter(d.RetryAfter), 10)
	}
	return limit, remaining, reset
}

// EffectiveWindow returns the draft's t for d: the whole seconds, rounded
// up, until the decided policy has more quota available, and whether d
// tells that exactly: on every denial, and on admissions under
// fixed_window and gcra. A log or sliding_counter admission does not say
// when its next entry leaves. A concurrency limit never tells it: a held
// lease may be released at any moment, and its RetryAfter is only the
// latest time a slot frees (when enough leases time out).
func (p *Policy) EffectiveWindow(d limiter.Decision) (int64, bool) {
	it := p.pick(d)
	if IsLease(it.rule) {
		return 0, false
	}
	if !d.Allowed {
		// The denied request costs 1: it would be admitted the moment one
		// more unit is available. Equal to Retry-After, as the draft wants
		// Retry-After no earlier than the end of the effective window.
		return RetryAfter(d.RetryAfter), true
	}
	rule := it.rule
	rule.Limit = d.Limit
	if after, ok := rule.MoreAfter(d.Remaining, d.ResetAfter); ok {
		return Seconds(after), true
	}
	return 0, false
}

// RetryAfter converts a retry delay into the whole seconds of a
// Retry-After field: rounded up, at least 1 (a client told 0 would retry
// at once and be denied again).
func RetryAfter(d time.Duration) int64 {
	return max(Seconds(d), 1)
}

// Seconds rounds d up to whole seconds; negative durations count as 0.
func Seconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// Quote writes s as a structured-field String (RFC 8941): in double
// quotes, with '"' and '\' escaped.
func Quote(s string) string {
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	b.WriteByte('"')
	return b.String()
}

// CheckName returns an error unless name can name a policy: not empty,
// and printable ASCII, which a structured-field String can hold.
func CheckName(name string) error {
	if name == "" {
		return errors.New("policy name is empty")
	}
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("policy name %q has a byte %#x; use printable ASCII", name, c)
		}
	}
	return nil
}
