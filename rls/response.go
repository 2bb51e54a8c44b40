package rls

import (
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

// This file holds what Service.answer writes beside the statuses: the
// response headers of WithResponseHeaders, and the rounding of the
// durations it reports.

// headers are the reference's three headers for the status closest to its
// limit, or the last that refused.
func (s *Service) headers(sts []*rlsv3.RateLimitResponse_DescriptorStatus) []*corev3.HeaderValue {
	var pick *rlsv3.RateLimitResponse_DescriptorStatus
	for _, st := range sts {
		if st.CurrentLimit == nil {
			continue
		}
		if st.Code == rlsv3.RateLimitResponse_OVER_LIMIT || pick == nil ||
			(pick.Code != rlsv3.RateLimitResponse_OVER_LIMIT && st.LimitRemaining < pick.LimitRemaining) {
			pick = st
		}
	}
	if pick == nil {
		return nil
	}
	h := s.opts.headers
	return []*corev3.HeaderValue{
		{Key: h.Limit, Value: strconv.FormatUint(uint64(pick.CurrentLimit.RequestsPerUnit), 10)},
		{Key: h.Remaining, Value: strconv.FormatUint(uint64(pick.LimitRemaining), 10)},
		{Key: h.Reset, Value: strconv.FormatInt(pick.DurationUntilReset.GetSeconds(), 10)},
	}
}

// ceilSecond rounds d up to whole seconds: a wait is never reported early.
func ceilSecond(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return (d + time.Second - 1) / time.Second * time.Second
}
