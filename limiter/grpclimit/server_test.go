package grpclimit_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/backend/observe"
	"github.com/limitkit/limitkit/backend/storetest"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/grpclimit"
	"github.com/limitkit/limitkit/limiter/httplimit"
	"github.com/limitkit/limitkit/limiter/internal/transporttest"
)

const (
	check = "/grpc.health.v1.Health/Check"
	watch = "/grpc.health.v1.Health/Watch"
)

// newLimiter returns a limiter on a memory store driven by a fake clock.
var newLimiter = transporttest.NewLimiter

// server is a real gRPC server on a loopback TCP port serving the standard
// health service, with a client connected to it.
type server struct {
	srv      *grpc.Server
	health   *health.Server
	client   healthpb.HealthClient
	attempts atomic.Int64 // calls that reached the server, limited or not
	served   atomic.Int64 // calls that reached the handler
	seen     atomic.Pointer[seenDecision]
}

// seenDecision is what grpclimit.DecisionFrom found in the last call's
// context.
type seenDecision struct {
	d  limiter.Decision
	ok bool
}

func startServer(t *testing.T, ic *grpclimit.Interceptor, dial ...grpc.DialOption) *server {
	t.Helper()
	s := &server{health: health.NewServer()}
	countAttempt := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		s.attempts.Add(1)
		return h(ctx, req)
	}
	countServed := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		s.served.Add(1)
		d, ok := grpclimit.DecisionFrom(ctx)
		s.seen.Store(&seenDecision{d, ok})
		return h(ctx, req)
	}
	countStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		s.served.Add(1)
		d, ok := grpclimit.DecisionFrom(ss.Context())
		s.seen.Store(&seenDecision{d, ok})
		return h(srv, ss)
	}
	s.srv = grpc.NewServer(
		grpc.ChainUnaryInterceptor(countAttempt, ic.Unary(), countServed),
		grpc.ChainStreamInterceptor(ic.Stream(), countStream))
	healthpb.RegisterHealthServer(s.srv, s.health)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = s.srv.Serve(lis) }()
	t.Cleanup(s.srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, dial...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	s.client = healthpb.NewHealthClient(conn)
	return s
}

func newInterceptor(t *testing.T, lim *limiter.Limiter, opts ...grpclimit.Option) *grpclimit.Interceptor {
	t.Helper()
	ic, err := grpclimit.New(lim, opts...)
	require.NoError(t, err)
	return ic
}

// call runs Check and returns its header metadata and error.
func (s *server) check(ctx context.Context, opts ...grpc.CallOption) (metadata.MD, error) {
	var md metadata.MD
	_, err := s.client.Check(ctx, &healthpb.HealthCheckRequest{}, append(opts, grpc.Header(&md))...)
	return md, err
}

func details(t *testing.T, err error) (*errdetails.RetryInfo, *errdetails.QuotaFailure) {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status error: %v", err)
	var ri *errdetails.RetryInfo
	var qf *errdetails.QuotaFailure
	for _, d := range st.Details() {
		switch v := d.(type) {
		case *errdetails.RetryInfo:
			ri = v
		case *errdetails.QuotaFailure:
			qf = v
		}
	}
	require.NotNil(t, ri, "no RetryInfo in %v", st.Details())
	require.NotNil(t, qf, "no QuotaFailure in %v", st.Details())
	return ri, qf
}

func TestUnaryDenialIsResourceExhaustedWithRetryInfo(t *testing.T) {
	lim, fake := newLimiter(t, nil, limiter.Config{Limit: 2, Window: time.Minute, Prefix: "rpc:"})
	s := startServer(t, newInterceptor(t, lim))
	ctx := t.Context()

	// A sliding log's admission tells no t (draft-11: when more quota
	// comes is not known exactly); a denial's t is the retry delay.
	for _, want := range []string{`"default";r=1`, `"default";r=0`} {
		md, err := s.check(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{`"default";q=2;w=60`}, md.Get("ratelimit-policy"))
		assert.Equal(t, []string{want}, md.Get("ratelimit"))
		fake.Advance(10 * time.Second)
	}
	md, err := s.check(ctx)
	require.Error(t, err)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	ri, qf := details(t, err)
	// Admissions at start and start+10s; now is start+20s. The first
	// leaves the window at start+60s: retry in 40s (the key is free
	// only in 50s, which is not the retry delay).
	assert.Equal(t, 40*time.Second, ri.GetRetryDelay().AsDuration())
	require.Len(t, qf.GetViolations(), 1)
	assert.Equal(t, "policy:default", qf.GetViolations()[0].GetSubject())
	assert.Equal(t, int64(2), qf.GetViolations()[0].GetQuotaValue())
	assert.Equal(t, []string{`"default";r=0;t=40`}, md.Get("ratelimit"))
	assert.Equal(t, []string{"40"}, md.Get("retry-after"))
	assert.Equal(t, int64(3), s.attempts.Load())
	assert.Equal(t, int64(2), s.served.Load(), "the denied call reached the handler")

	d, ok := grpclimit.RetryDelay(err)
	assert.True(t, ok)
	assert.Equal(t, 40*time.Second, d)
}

func TestStreamTakesOneUnitWhenItOpens(t *testing.T) {
	lim, _ := newLimiter(t, nil, limiter.Config{Limit: 1, Window: time.Minute})
	s := startServer(t, newInterceptor(t, lim))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()

	first, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	msg, err := first.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, msg.GetStatus())
	md, err := first.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";r=0`}, md.Get("ratelimit"))

	second, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = second.Recv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	ri, _ := details(t, err)
	assert.Equal(t, time.Minute, ri.GetRetryDelay().AsDuration())
	md, err = second.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{`"default";r=0;t=60`}, md.Get("ratelimit"))

	// The open stream's messages are not limited: it still gets updates.
	s.health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	msg, err = first.Recv()
	require.NoError(t, err)
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, msg.GetStatus())
	assert.Equal(t, int64(1), s.served.Load())
}

func TestKeyByMetadata(t *testing.T) {
	lim, _ := newLimiter(t, nil, limiter.Config{Limit: 1, Window: time.Minute})
	s := startServer(t, newInterceptor(t, lim, grpclimit.WithKey(grpclimit.Metadata("X-Api-Key"))))
	withKey := func(k string) context.Context {
		return metadata.AppendToOutgoingContext(t.Context(), "x-api-key", k)
	}
	_, err := s.check(withKey("alice"))
	require.NoError(t, err)
	_, err = s.check(withKey("alice"))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "alice's second call")
	_, err = s.check(withKey("bob"))
	assert.NoError(t, err, "bob has his own allowance")
	_, err = s.check(t.Context())
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "a call without the key")
	assert.Equal(t, int64(2), s.served.Load())
}

func TestKeyByPeerAndMethod(t *testing.T) {
	lim, _ := newLimiter(t, nil, limiter.Config{Limit: 1, Window: time.Minute})
	var seen atomic.Value
	key := grpclimit.Join(grpclimit.PeerAddr(), grpclimit.FullMethod())
	spy := func(ctx context.Context, m string) grpclimit.Key {
		k := key(ctx, m)
		seen.Store(k.Value)
		return k
	}
	s := startServer(t, newInterceptor(t, lim, grpclimit.WithKey(spy)))
	_, err := s.check(t.Context())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1|"+check, seen.Load())
	_, err = s.check(t.Context())
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))

	// Another method of the same client has its own allowance.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = w.Recv()
	assert.NoError(t, err)
	assert.Equal(t, "127.0.0.1|"+watch, seen.Load())
}

// countingStore counts the store calls the limiter makes.
func countingStore(t *testing.T) (backend.Store, *atomic.Int64) {
	t.Helper()
	mem, err := memorystore.New()
	require.NoError(t, err)
	var n atomic.Int64
	return observe.Wrap(mem, observe.Observer{OnDecision: func(context.Context, observe.Decision) { n.Add(1) }}), &n
}

func TestMethodPatterns(t *testing.T) {
	t.Run("only", func(t *testing.T) {
		lim, _ := newLimiter(t, nil, limiter.Config{Limit: 1, Window: time.Minute})
		s := startServer(t, newInterceptor(t, lim, grpclimit.WithMethods(check)))
		_, err := s.check(t.Context())
		require.NoError(t, err)
		_, err = s.check(t.Context())
		assert.Equal(t, codes.ResourceExhausted, status.Code(err), "Check is limited")
		for range 2 {
			ctx, cancel := context.WithCancel(t.Context())
			w, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
			require.NoError(t, err)
			_, err = w.Recv()
			assert.NoError(t, err, "Watch is not limited")
			md, err := w.Header()
			require.NoError(t, err)
			assert.Empty(t, md.Get("ratelimit"))
			cancel()
		}
	})
	t.Run("exempt costs no store call", func(t *testing.T) {
		store, calls := countingStore(t)
		lim, _ := newLimiter(t, store, limiter.Config{Limit: 1, Window: time.Minute})
		s := startServer(t, newInterceptor(t, lim, grpclimit.WithoutMethods("/grpc.health.v1.Health/*")))
		for range 3 {
			md, err := s.check(t.Context())
			require.NoError(t, err)
			assert.Empty(t, md.Get("ratelimit-policy"))
		}
		assert.Equal(t, int64(0), calls.Load())

		// Control: the same store counts the calls of a limited method.
		lim2, _ := newLimiter(t, store, limiter.Config{Limit: 1, Window: time.Minute})
		s2 := startServer(t, newInterceptor(t, lim2, grpclimit.WithoutMethods(watch)))
		_, err := s2.check(t.Context())
		require.NoError(t, err)
		assert.Equal(t, int64(1), calls.Load())
	})
	t.Run("exempt wins over only", func(t *testing.T) {
		lim, _ := newLimiter(t, nil, limiter.Config{Limit: 1, Window: time.Minute})
		s := startServer(t, newInterceptor(t, lim, grpclimit.WithMethods("/grpc.health.v1.Health/*"), grpclimit.WithoutMethods(check)))
		for range 2 {
			_, err := s.check(t.Context())
			require.NoError(t, err)
		}
	})
}

func TestValidateNamesPatternsThatMatchNothing(t *testing.T) {
	lim, _ := newLimiter(t, nil, limiter.Config{Limit: 1, Window: time.Minute})
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())

	good := newInterceptor(t, lim, grpclimit.WithMethods(check, "/grpc.health.v1.Health/*"), grpclimit.WithoutMethods(watch))
	assert.NoError(t, good.Validate(srv))

	for _, opt := range []grpclimit.Option{
		grpclimit.WithMethods("/grpc.health.v1.Health/Chek"),
		grpclimit.WithMethods("/grpc.health.v2.Health/*"),
		grpclimit.WithoutMethods("/grpc.health.v1.Health/Wach"),
	} {
		ic := newInterceptor(t, lim, opt)
		err := ic.Validate(srv)
		require.Error(t, err)
		assert.ErrorIs(t, err, grpclimit.ErrUnknownMethod)
		assert.Contains(t, err.Error(), "grpc.health.v1.Health", "the error lists the registered services")
	}
	err := newInterceptor(t, lim, grpclimit.WithMethods("/grpc.health.v1.Health/Chek", check)).Validate(srv)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"/grpc.health.v1.Health/Chek"`)
	assert.NotContains(t, err.Error(), `"`+check+`"`, "a good pattern is not named")
	assert.Error(t, good.Validate(nil))
}

func TestNewRejectsBadInput(t *testing.T) {
	lim, _ := newLimiter(t, nil, limiter.Config{Limit: 1, Window: time.Minute})
	_, err := grpclimit.New(nil)
	assert.Error(t, err)
	for _, c := range []struct {
		name, option string
		opt          grpclimit.Option
	}{
		{"nil key", "WithKey", grpclimit.WithKey(nil)},
		{"no slash", "WithMethods", grpclimit.WithMethods("grpc.health.v1.Health/Check")},
		{"no method", "WithMethods", grpclimit.WithMethods("/grpc.health.v1.Health")},
		{"empty method", "WithMethods", grpclimit.WithMethods("/grpc.health.v1.Health/")},
		{"extra segment", "WithMethods", grpclimit.WithMethods("/a/b/c")},
		{"partial wildcard", "WithMethods", grpclimit.WithMethods("/a/Get*")},
		{"wildcard service", "WithoutMethods", grpclimit.WithoutMethods("/*/Check")},
		{"no patterns", "WithMethods", grpclimit.WithMethods()},
		{"no exempt patterns", "WithoutMethods", grpclimit.WithoutMethods()},
		{"empty policy", "WithPolicyName", grpclimit.WithPolicyName("")},
		{"control byte", "WithPolicyName", grpclimit.WithPolicyName("a\nb")},
		{"header set", "WithHeaders", grpclimit.WithHeaders(8)},
		{"error policy", "WithErrorPolicy", grpclimit.WithErrorPolicy(7)},
		{"nil logger", "WithLogger", grpclimit.WithLogger(nil)},
		{"release timeout", "WithReleaseTimeout", grpclimit.WithReleaseTimeout(0)},
	} {
		// A valid option first: the error names the one refused.
		_, err := grpclimit.New(lim, grpclimit.WithHeaders(grpclimit.DraftHeaders), c.opt)
		assert.ErrorContains(t, err, "grpclimit: "+c.option+": ", c.name)
	}
	_, err = grpclimit.New(lim, nil, grpclimit.WithPolicyName("p"))
	assert.NoError(t, err, "a nil option is ignored")
	_, err = grpclimit.New(lim, grpclimit.WithMethods(check, "/grpc.health.v1.Health/*"))
	assert.NoError(t, err, "control: good patterns")
}

func TestStoreErrorPolicy(t *testing.T) {
	down := storetest.Down{Err: errors.New("dial tcp 10.0.0.7:6379: connection refused")}
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))

	t.Run("fail open", func(t *testing.T) {
		logs.Reset()
		lim, _ := newLimiter(t, down, limiter.Config{Limit: 1, Window: time.Minute})
		s := startServer(t, newInterceptor(t, lim, grpclimit.WithLogger(logger)))
		for range 2 {
			md, err := s.check(t.Context())
			require.NoError(t, err)
			assert.Equal(t, []string{`"default";q=1;w=60`}, md.Get("ratelimit-policy"))
			assert.Empty(t, md.Get("ratelimit"), "no decision, so no remaining count")
		}
		assert.Contains(t, logs.String(), "connection refused")
		assert.Equal(t, int64(2), s.served.Load())
	})
	t.Run("fail closed", func(t *testing.T) {
		logs.Reset()
		lim, _ := newLimiter(t, down, limiter.Config{Limit: 1, Window: time.Minute})
		s := startServer(t, newInterceptor(t, lim, grpclimit.WithLogger(logger), grpclimit.WithErrorPolicy(grpclimit.FailClosed)))
		_, err := s.check(t.Context())
		assert.Equal(t, codes.Unavailable, status.Code(err))
		assert.NotContains(t, err.Error(), "10.0.0.7", "the store's error stays in the log")
		assert.Contains(t, logs.String(), "connection refused")
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		w, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		_, err = w.Recv()
		assert.Equal(t, codes.Unavailable, status.Code(err))
		assert.Equal(t, int64(0), s.served.Load())
	})
}

// TestFieldsMatchHTTPLimit checks that the metadata carries what httplimit
// puts in its header fields for the same decisions, under every algorithm,
// with and without a guard, admitted and denied.
func TestFieldsMatchHTTPLimit(t *testing.T) {
	configs := map[string]limiter.Config{}
	for _, alg := range []algorithms.Name{algorithms.SlidingLog, algorithms.SlidingCounter, algorithms.FixedWindow, algorithms.GCRA} {
		configs[string(alg)] = limiter.Config{Algorithm: alg, Limit: 3, Window: time.Minute, Prefix: "p:"}
		configs[string(alg)+" guarded"] = limiter.Config{Algorithm: alg, Limit: 3, Window: time.Minute, Prefix: "p:",
			Guard: &limiter.Guard{Algorithm: alg, Limit: 4, Window: time.Hour}}
	}
	// Guards of another algorithm than the main limit's.
	configs["sliding_log, fixed_window guard"] = limiter.Config{Limit: 3, Window: time.Minute, Prefix: "p:",
		Guard: &limiter.Guard{Limit: 4, Window: time.Hour}}
	configs["fixed_window, gcra guard"] = limiter.Config{Algorithm: algorithms.FixedWindow, Limit: 3, Window: time.Minute, Prefix: "p:",
		Guard: &limiter.Guard{Algorithm: algorithms.GCRA, Limit: 4, Window: time.Hour}}
	steps := []time.Duration{0, 7 * time.Second, 1500 * time.Millisecond, 0, 20 * time.Second, 31 * time.Second, 0, 2 * time.Second, 45 * time.Second, 0}
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			httpLim, httpClock := newLimiter(t, nil, cfg)
			rpcLim, rpcClock := newLimiter(t, nil, cfg)
			both := httplimit.DraftHeaders | httplimit.XRateLimitHeaders
			mw, err := httplimit.New(httpLim, httplimit.WithPolicyName("orders"), httplimit.WithHeaders(both),
				httplimit.WithKey(func(*http.Request) httplimit.Key { return httplimit.Key{Value: "127.0.0.1"} }))
			require.NoError(t, err)
			h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			s := startServer(t, newInterceptor(t, rpcLim, grpclimit.WithPolicyName("orders"),
				grpclimit.WithHeaders(grpclimit.DraftHeaders|grpclimit.XRateLimitHeaders)))
			denied := 0
			for i, step := range steps {
				httpClock.Advance(step)
				rpcClock.Advance(step)
				w := httptest.NewRecorder()
				h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
				md, err := s.check(t.Context())
				if w.Code == http.StatusTooManyRequests {
					denied++
					assert.Equal(t, codes.ResourceExhausted, status.Code(err), "call %d", i)
				} else {
					assert.NoError(t, err, "call %d", i)
				}
				for _, field := range []string{"RateLimit-Policy", "RateLimit", "X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After"} {
					assert.Equal(t, strings.Join(w.Header().Values(field), ", "), strings.Join(md.Get(strings.ToLower(field)), ", "), "call %d, %s", i, field)
				}
			}
			assert.Positive(t, denied, "the steps never reached a denial")
		})
	}
}

func TestGuardDenialNamesTheGuard(t *testing.T) {
	lim, _ := newLimiter(t, nil, limiter.Config{Limit: 3, Window: time.Minute, Guard: &limiter.Guard{Limit: 2, Window: time.Hour}})
	s := startServer(t, newInterceptor(t, lim, grpclimit.WithPolicyName("orders")))
	var err error
	for range 3 {
		_, err = s.check(t.Context())
	}
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	ri, qf := details(t, err)
	assert.Equal(t, time.Hour, ri.GetRetryDelay().AsDuration())
	assert.Equal(t, "policy:orders-guard", qf.GetViolations()[0].GetSubject())
	assert.Equal(t, int64(2), qf.GetViolations()[0].GetQuotaValue())
	assert.Contains(t, status.Convert(err).Message(), `"orders-guard"`)
}

func TestDecisionFrom(t *testing.T) {
	lim, _ := newLimiter(t, nil, limiter.Config{Limit: 3, Window: time.Minute})
	s := startServer(t, newInterceptor(t, lim))
	for _, want := range []int64{2, 1} {
		_, err := s.check(t.Context())
		require.NoError(t, err)
		got := s.seen.Load()
		require.True(t, got.ok, "the handler found no decision")
		assert.True(t, got.d.Allowed)
		assert.Equal(t, want, got.d.Remaining)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w, err := s.client.Watch(ctx, &healthpb.HealthCheckRequest{})
	require.NoError(t, err)
	_, err = w.Recv()
	require.NoError(t, err)
	got := s.seen.Load()
	require.True(t, got.ok, "the stream handler found no decision")
	assert.Equal(t, int64(0), got.d.Remaining)

	// No decision: an exempt method, a store that failed (served open).
	exempt := startServer(t, newInterceptor(t, lim, grpclimit.WithoutMethods(check)))
	_, err = exempt.check(t.Context())
	require.NoError(t, err)
	assert.False(t, exempt.seen.Load().ok)
	downLim, _ := newLimiter(t, storetest.Down{Err: errors.New("down")}, limiter.Config{Limit: 3, Window: time.Minute})
	down := startServer(t, newInterceptor(t, downLim, grpclimit.WithLogger(slog.New(slog.DiscardHandler))))
	_, err = down.check(t.Context())
	require.NoError(t, err)
	assert.False(t, down.seen.Load().ok)
}
