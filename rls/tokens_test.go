package rls_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	rlsconfv3 "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/internal/dev/redistest"
	"github.com/limitkit/limitkit/rls"
	"github.com/limitkit/limitkit/rls/internal/xds"
)

// tokenDomain is a domain as Envoy Gateway names one (its listener).
const tokenDomain = "default/eg/http"

// tokensXDS is a budget of 1000 tokens per hour per client as Envoy
// Gateway translates a BackendTrafficPolicy rule with cost.response and
// pushes it over xDS: the route's descriptor, the rule's, then the
// client's header. The proto has no algorithm: fixed_window.
func tokensXDS() []*rlsconfv3.RateLimitConfig {
	return []*rlsconfv3.RateLimitConfig{{
		Name: tokenDomain, Domain: tokenDomain,
		Descriptors: []*rlsconfv3.RateLimitDescriptor{{
			Key: "httproute/default/llm/rule/0/match/0/*", Value: "httproute/default/llm/rule/0/match/0/*",
			Descriptors: []*rlsconfv3.RateLimitDescriptor{{
				Key: "rule-0-match-0",
				RateLimit: &rlsconfv3.RateLimitPolicy{
					Unit: rlsconfv3.RateLimitUnit_HOUR, RequestsPerUnit: 1000,
				},
			}},
		}},
	}}
}

// tokensFile is the same budget from a file, on algorithm alg.
func tokensFile(alg string) string {
	return fmt.Sprintf(`domain: %q
descriptors:
  - key: httproute/default/llm/rule/0/match/0/*
    value: httproute/default/llm/rule/0/match/0/*
    descriptors:
      - key: rule-0-match-0
        rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: %s}
`, tokenDomain, alg)
}

// tokenCall is one call as Envoy makes it for client: hits 0 on the
// request path, the tokens when the stream is done.
func tokenCall(client string, hits uint64) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: tokenDomain, Descriptors: []*ratelimitv3.RateLimitDescriptor{{
		Entries: []*ratelimitv3.RateLimitDescriptor_Entry{
			{Key: "httproute/default/llm/rule/0/match/0/*", Value: "httproute/default/llm/rule/0/match/0/*"},
			{Key: "rule-0-match-0", Value: client},
		},
		HitsAddend: wrapperspb.UInt64(hits),
	}}}
}

// tokenStack is a service on store with rules, served over gRPC.
func tokenStack(t *testing.T, store backend.Store, rules *rls.Rules, opts ...rls.Option) rlsv3.RateLimitServiceClient {
	t.Helper()
	opts = append([]rls.Option{rls.WithClock(clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)))}, opts...)
	svc, err := rls.New(store, rules, opts...)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	rls.Register(srv, svc)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return rlsv3.NewRateLimitServiceClient(conn)
}

// tokenStores are the stores the token tests run on: memory and real
// Redis (go-redis; its native fixed-window path on the reference's keys).
func tokenStores(t *testing.T) map[string]func(t *testing.T) backend.Store {
	srv := redistest.Start(t)
	return map[string]func(t *testing.T) backend.Store{
		"memory": func(t *testing.T) backend.Store {
			s, err := memorystore.New()
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"redis": func(t *testing.T) backend.Store {
			if _, err := srv.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			t.Cleanup(func() { c.Close() })
			s, err := goredisstore.New(c)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

// tokenRules are the budget's rules by algorithm: fixed_window over xDS,
// the others from files.
func tokenRules(t *testing.T) map[string]*rls.Rules {
	out := map[string]*rls.Rules{}
	r, err := xds.Compile(tokensXDS(), rls.NewRules)
	if err != nil {
		t.Fatal(err)
	}
	out["fixed_window/xds"] = r
	for _, alg := range []string{"sliding_log", "sliding_counter", "gcra"} {
		r, err := rls.NewRules(rls.File{Name: "tokens.yaml", Data: []byte(tokensFile(alg))})
		if err != nil {
			t.Fatal(err)
		}
		out[alg] = r
	}
	return out
}

// check answers a request-path call (hits 0) for client.
func check(t *testing.T, c rlsv3.RateLimitServiceClient, client string) *rlsv3.RateLimitResponse_DescriptorStatus {
	t.Helper()
	resp, err := c.ShouldRateLimit(context.Background(), tokenCall(client, 0))
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetStatuses()[0]
}

// charge sends a stream-done call of tokens for client.
func charge(t *testing.T, c rlsv3.RateLimitServiceClient, client string, tokens uint64) {
	t.Helper()
	if _, err := c.ShouldRateLimit(context.Background(), tokenCall(client, tokens)); err != nil {
		t.Fatal(err)
	}
}

// TestTokenBudgetCharges: on 1000 tokens per hour, four charges of 300
// (and one of 1200) then a check answers OVER_LIMIT with 0 remaining;
// three of 300 leave the check OK. Without LIMITKIT_CHARGED_DOMAINS (the
// control) the overspent budget still answers OK: the bug.
func TestTokenBudgetCharges(t *testing.T) {
	for sname, mk := range tokenStores(t) {
		for rname, rules := range tokenRules(t) {
			t.Run(sname+"/"+rname, func(t *testing.T) {
				for _, charged := range []bool{true, false} {
					var opts []rls.Option
					if charged {
						opts = append(opts, rls.WithChargedDomains(tokenDomain))
					}
					c := tokenStack(t, mk(t), rules, opts...)
					for client, charges := range map[string][]uint64{"four": {300, 300, 300, 300}, "one": {1200}, "three": {300, 300, 300}} {
						for _, n := range charges {
							charge(t, c, client, n)
						}
						st := check(t, c, client)
						switch {
						case client == "three":
							if st.GetCode() != rlsv3.RateLimitResponse_OK {
								t.Errorf("charged %v, %s: 900 of 1000 spent: %v, want OK", charged, client, st)
							}
						case charged:
							if st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st.GetLimitRemaining() != 0 {
								t.Errorf("%s: check after %v: %v remaining %d, want OVER_LIMIT with 0", client, charges, st.GetCode(), st.GetLimitRemaining())
							}
						default:
							if st.GetCode() != rlsv3.RateLimitResponse_OK {
								t.Errorf("control: %s: %v; the test expects the uncharged default to answer OK", client, st.GetCode())
							}
						}
					}
				}
			})
		}
	}
}

// TestTokenBudgetStreams: 64 concurrent streams each check (hits 0), then
// charge a random count of tokens, until refused (at most 40 rounds each).
// Once a charge has spent the budget, no check sent after it passes; and
// the tokens admitted are at most the limit plus one charge, up to
// maxTokens, for each stream in flight (its check sent, its charge not yet
// answered) when the store was spent. The moment the store was spent is
// not seen from here, so the bound takes the most streams ever in flight:
// a stream whose check the store passed before that moment and whose
// charge it counted after was in flight then, and it charges once.
// (Sampling the count when this test's own total passed the limit read it
// after the store's moment, when some of those streams had already
// charged: the bound was then too tight and the test failed under load.)
func TestTokenBudgetStreams(t *testing.T) {
	for sname, mk := range tokenStores(t) {
		for rname, rules := range tokenRules(t) {
			t.Run(sname+"/"+rname, func(t *testing.T) {
				c := tokenStack(t, mk(t), rules, rls.WithChargedDomains(tokenDomain))
				if err := streamBudget(t, c); err != nil {
					t.Error(err)
				}
				if st := check(t, c, "shared"); st.GetCode() != rlsv3.RateLimitResponse_OVER_LIMIT || st.GetLimitRemaining() != 0 {
					t.Errorf("final check: %v remaining %d, want OVER_LIMIT with 0", st.GetCode(), st.GetLimitRemaining())
				}
			})
		}
	}
	// Control: without the setting, a charge past what is left is refused
	// and consumes nothing, so checks keep passing: the test sees it.
	for rname, rules := range tokenRules(t) {
		s, err := memorystore.New()
		if err != nil {
			t.Fatal(err)
		}
		if err := streamBudget(t, tokenStack(t, s, rules)); err == nil {
			t.Errorf("control %s: an uncharged budget passed the streams check", rname)
		}
	}
}

const streams, streamRounds, maxTokens, streamLimit = 64, 40, 60, 1000

// streamBudget runs the streams against c and returns what broke the
// promise: a check passed after the budget was spent, or more tokens than
// the bound.
func streamBudget(t *testing.T, c rlsv3.RateLimitServiceClient) error {
	var spent atomic.Bool
	var total, inflight, mostInflight, late atomic.Int64
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(i), 7))
			for range streamRounds {
				wasSpent := spent.Load()
				storeMax(&mostInflight, inflight.Add(1))
				resp, err := c.ShouldRateLimit(context.Background(), tokenCall("shared", 0))
				if err != nil {
					t.Error(err)
					return
				}
				if resp.GetOverallCode() != rlsv3.RateLimitResponse_OK {
					inflight.Add(-1)
					return
				}
				if wasSpent {
					late.Add(1)
				}
				n := 1 + rng.Int64N(maxTokens)
				if _, err := c.ShouldRateLimit(context.Background(), tokenCall("shared", uint64(n))); err != nil {
					t.Error(err)
					return
				}
				inflight.Add(-1)
				if total.Add(n) >= streamLimit {
					spent.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	var errs []error
	if !spent.Load() {
		errs = append(errs, fmt.Errorf("the budget was never spent: %d tokens", total.Load()))
	}
	if late.Load() > 0 {
		errs = append(errs, fmt.Errorf("%d checks passed after the budget was spent", late.Load()))
	}
	if bound := streamLimit - 1 + mostInflight.Load()*maxTokens; total.Load() > bound {
		errs = append(errs, fmt.Errorf("%d tokens admitted; bound %d (limit %d, at most %d in flight)", total.Load(), bound, streamLimit, mostInflight.Load()))
	}
	return errors.Join(errs...)
}

// storeMax raises m to v if v is larger.
func storeMax(m *atomic.Int64, v int64) {
	for {
		old := m.Load()
		if v <= old || m.CompareAndSwap(old, v) {
			return
		}
	}
}
