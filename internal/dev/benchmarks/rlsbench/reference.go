package rlsbench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/limitkit/limitkit/rls"
)

// Reference is the reference server's algorithm (envoyproxy/ratelimit,
// src/redis/fixed_cache_impl.go, without its local cache and per-second
// pool): per descriptor a key of the domain, the entries and the window's
// start, one INCRBY of the hits and one EXPIRE of the unit's length,
// every descriptor of a request in one pipeline; a descriptor is
// OVER_LIMIT when its count after the increment exceeds the limit, and
// refused hits are counted. It serves the same gRPC API as rls.Service.
// Matching is exact value, then the key alone (no wildcards).
type Reference struct {
	rlsv3.UnimplementedRateLimitServiceServer
	domains map[string]*rls.DomainConfig
	store   counter
	now     func() time.Time
}

// NewReference returns the reference algorithm on configs, counting
// through the go-redis or the rueidis client.
func NewReference(client any, configs ...*rls.DomainConfig) (*Reference, error) {
	store, err := newCounter(client)
	if err != nil {
		return nil, fmt.Errorf("reference: %w", err)
	}
	r := &Reference{domains: map[string]*rls.DomainConfig{}, store: store, now: time.Now}
	for _, c := range configs {
		r.domains[c.Domain] = c
	}
	return r, nil
}

// match walks the descriptor tree as the reference does: at each level
// the key_value node, else the key node; the limit is the last node's.
func match(ds []*rls.Descriptor, entries []*ratelimitv3.RateLimitDescriptor_Entry) *rls.Descriptor {
	var node *rls.Descriptor
	for _, e := range entries {
		var exact, byKey *rls.Descriptor
		for _, d := range ds {
			if d.Key == e.Key && d.Value == e.Value {
				exact = d
			} else if d.Key == e.Key && d.Value == "" {
				byKey = d
			}
		}
		if node = exact; node == nil {
			node = byKey
		}
		if node == nil {
			return nil
		}
		ds = node.Descriptors
	}
	return node
}

// ShouldRateLimit implements the RateLimitService.
func (r *Reference) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	cfg := r.domains[req.GetDomain()]
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK,
		Statuses: make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))}
	now := r.now().Unix()
	var keys []string
	var hits []uint64
	var expire []int64
	var at []int
	var limits []rls.Limit
	for i, d := range req.GetDescriptors() {
		resp.Statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
		if cfg == nil {
			continue
		}
		node := match(cfg.Descriptors, d.GetEntries())
		if node == nil || node.Unlimited || len(node.Limits) == 0 {
			continue
		}
		l := node.Limits[0]
		divider := int64(l.Window() / time.Second)
		var b strings.Builder
		b.WriteString(req.GetDomain())
		b.WriteByte('_')
		for _, e := range d.GetEntries() {
			b.WriteString(e.Key)
			b.WriteByte('_')
			b.WriteString(e.Value)
			b.WriteByte('_')
		}
		b.WriteString(strconv.FormatInt(now/divider*divider, 10))
		h := uint64(max(1, req.GetHitsAddend()))
		if d.HitsAddend != nil {
			h = d.HitsAddend.Value
		}
		keys, hits, expire = append(keys, b.String()), append(hits, h), append(expire, divider)
		at, limits = append(at, i), append(limits, l)
	}
	if len(keys) == 0 {
		return resp, nil
	}
	counts, err := r.store.incrExpire(ctx, keys, hits, expire)
	if err != nil {
		return nil, status.Errorf(codes.Unavailable, "redis: %v", err)
	}
	for j, i := range at {
		l, st := limits[j], resp.Statuses[i]
		st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Unit: l.Unit, RequestsPerUnit: l.RequestsPerUnit}
		st.DurationUntilReset = durationpb.New(time.Duration(expire[j]-now%expire[j]) * time.Second)
		if counts[j] > uint64(l.RequestsPerUnit) {
			st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		} else {
			st.LimitRemaining = uint32(uint64(l.RequestsPerUnit) - counts[j])
		}
	}
	return resp, nil
}
