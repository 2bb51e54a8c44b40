package rls

import (
	"strconv"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitkit/limitkit/algorithms"
)

// appendID appends the key id of a request descriptor: the domain and its
// entries, each length-prefixed so that no two descriptors share an id.
func appendID(b []byte, domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry) []byte {
	b = strconv.AppendInt(b, int64(len(domain)), 10)
	b = append(b, ':')
	b = append(b, domain...)
	for _, e := range entries {
		for _, s := range [2]string{e.GetKey(), e.GetValue()} {
			b = append(b, '|')
			b = strconv.AppendInt(b, int64(len(s)), 10)
			b = append(b, ':')
			b = append(b, s...)
		}
	}
	return b
}

// fullKey is the reference's detailed metric key: domain.key_value...
func fullKey(domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		b.WriteByte('_')
		b.WriteString(e.GetValue())
	}
	return b.String()
}

// overrideRule compiles a limit Envoy sent in the descriptor (its
// limit override): a fixed window, never in shadow mode, as in the
// reference server.
func overrideRule(domain string, d *ratelimitv3.RateLimitDescriptor, o *ratelimitv3.RateLimitDescriptor_RateLimitOverride) (*rule, error) {
	l := Limit{
		Unit:            rlsv3.RateLimitResponse_RateLimit_Unit(o.GetUnit()),
		RequestsPerUnit: o.GetRequestsPerUnit(),
		UnitMultiplier:  o.GetUnitMultiplier().GetValue(),
		Algorithm:       algorithms.FixedWindow,
	}
	w := l.Window()
	if unitLength(l.Unit) == 0 || w > algorithms.MaxWindow {
		return nil, status.Errorf(codes.InvalidArgument, "descriptor limit override: unit %v x %d is not a window of at most %v", o.GetUnit(), l.UnitMultiplier, algorithms.MaxWindow)
	}
	r := &rule{
		limit:   l,
		alg:     algorithms.Rule{Algorithm: l.Algorithm, Limit: int64(l.RequestsPerUnit), Window: w},
		prefix:  "rls:" + strconv.FormatInt(w.Milliseconds(), 10) + ":",
		statKey: descriptorKey(domain, d),
		current: &rlsv3.RateLimitResponse_RateLimit{RequestsPerUnit: l.RequestsPerUnit, Unit: l.Unit},
	}
	if l.UnitMultiplier > 1 {
		r.current.UnitMultiplier = wrapperspb.UInt32(l.UnitMultiplier)
	}
	return r, nil
}

// descriptorKey is the reference's key of an override: domain.key_value...
// with "_value" left out where the value is empty.
func descriptorKey(domain string, d *ratelimitv3.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range d.GetEntries() {
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		if e.GetValue() != "" {
			b.WriteByte('_')
			b.WriteString(e.GetValue())
		}
	}
	return b.String()
}

// referenceKey returns the base of the Redis key envoyproxy/ratelimit
// counts a fixed window of a descriptor in (src/limiter/cache_key.go):
// the cache key prefix (CACHE_KEY_PREFIX), the domain and '_', then each
// entry's key and value, each followed by '_'. The window's start in
// seconds since the epoch completes it (backend.ExactKey.Name), so that
// limitkit-rls and the reference, on one Redis, count in the same key.
func referenceKey(prefix, domain string, entries []*ratelimitv3.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(domain)
	b.WriteByte('_')
	for _, e := range entries {
		b.WriteString(e.GetKey())
		b.WriteByte('_')
		b.WriteString(e.GetValue())
		b.WriteByte('_')
	}
	return b.String()
}

// sharesReferenceKey reports whether a limit counts in the reference's key:
// a fixed window of whole seconds, the only fixed window among its
// descriptor's limits (the reference has one limit per descriptor, and
// the key names the window's start only: two fixed windows of one
// descriptor would share it at every start they have in common).
func sharesReferenceKey(r *rule, fixedWindows int) bool {
	return r.alg.PerWindow() && fixedWindows == 1 &&
		r.alg.Window%time.Second == 0 && r.alg.Window >= time.Second
}

// referenceExpiry is how long a key shared with the reference is kept after
// each take: its window, as the reference's EXPIRE of the unit's seconds
// (its EXPIRATION_JITTER_MAX_SECONDS is not applied).
func referenceExpiry(r *rule) time.Duration { return r.alg.Window }
