package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/clock"
	"github.com/limitkit/limitkit/limiter"
	"github.com/limitkit/limitkit/limiter/grpclimit"
	"github.com/limitkit/limitkit/limiter/internal/transporttest"
)

// work is a test service with a unary method and a bidirectional stream,
// whose handlers do what the call's "mode" metadata says: "block" waits
// for the gate or the end of the call, "panic" panics, others return.
type work struct {
	gate    chan struct{}
	inside  gauge
	entered atomic.Int64
}

const (
	doMethod     = "/test.Work/Do"
	streamMethod = "/test.Work/Stream"
)

func (w *work) serve(ctx context.Context) {
	w.inside.enter()
	defer w.inside.leave()
	w.entered.Add(1)
	mode := ""
	if md, ok := metadata.FromIncomingContext(ctx); ok && len(md.Get("mode")) > 0 {
		mode = md.Get("mode")[0]
	}
	switch mode {
	case "block":
		select {
		case <-w.gate:
		case <-ctx.Done():
		}
	case "panic":
		panic("boom")
	case "spin":
		for range 20 {
			time.Sleep(0) // yield
		}
	}
}

var workDesc = grpc.ServiceDesc{
	ServiceName: "test.Work",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Do", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(emptypb.Empty)
		if err := dec(in); err != nil {
			return nil, err
		}
		h := func(ctx context.Context, _ any) (any, error) {
			srv.(*work).serve(ctx)
			return &emptypb.Empty{}, nil
		}
		if ic == nil {
			return h(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: doMethod}, h)
	}}},
	Streams: []grpc.StreamDesc{{StreamName: "Stream", ServerStreams: true, ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			// The stream holds its lease until the client closes its
			// side (or cancels): it reads until then. Its header (with
			// the rate-limit fields) goes out at once.
			if err := ss.SendHeader(nil); err != nil {
				return err
			}
			srv.(*work).serve(ss.Context())
			for {
				if err := ss.RecvMsg(new(emptypb.Empty)); err != nil {
					return nil
				}
			}
		}}},
}

// gauge counts handlers in flight and keeps the most seen at once.
type gauge struct{ now, max atomic.Int64 }

func (g *gauge) enter() {
	n := g.now.Add(1)
	for m := g.max.Load(); n > m && !g.max.CompareAndSwap(m, n); m = g.max.Load() {
	}
}

func (g *gauge) leave() { g.now.Add(-1) }

// workServer is a real gRPC server on loopback serving work through ic,
// with a recovery interceptor outermost (a panic that reached the gRPC
// runtime would end the process) that records what it recovered and the
// key's remaining allowance then. ended counts calls whose interceptors
// have all returned, release included.
type workServer struct {
	w         *work
	conn      *grpc.ClientConn
	lim       *limiter.Limiter
	panics    atomic.Int64
	remaining atomic.Int64 // Peek's Remaining when a panic was recovered
	ended     atomic.Int64
}

func startWork(t *testing.T, lim *limiter.Limiter, ic *grpclimit.Interceptor) *workServer {
	t.Helper()
	s := &workServer{w: &work{gate: make(chan struct{})}, lim: lim}
	s.remaining.Store(-1)
	recoverUnary := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer s.ended.Add(1)
		defer func() {
			if p := recover(); p != nil {
				require.Equal(t, "boom", p, "the handler's panic goes on")
				d, perr := s.lim.Peek(context.Background(), "k")
				require.NoError(t, perr)
				s.remaining.Store(d.Remaining)
				s.panics.Add(1)
				err = status.Error(codes.Internal, "panic")
			}
		}()
		return h(ctx, req)
	}
	endStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		defer s.ended.Add(1)
		return h(srv, ss)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recoverUnary, ic.Unary()), grpc.ChainStreamInterceptor(endStream, ic.Stream()))
	srv.RegisterService(&workDesc, s.w)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	s.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.conn.Close() })
	return s
}

// do calls Do in mode and returns its header metadata and error.
func (s *workServer) do(ctx context.Context, mode string) (metadata.MD, error) {
	var md metadata.MD
	ctx = metadata.AppendToOutgoingContext(ctx, "mode", mode)
	err := s.conn.Invoke(ctx, doMethod, &emptypb.Empty{}, new(emptypb.Empty), grpc.Header(&md))
	return md, err
}

// open opens a Stream in mode and waits for its header: admitted or not.
func (s *workServer) open(ctx context.Context, mode string) (grpc.ClientStream, metadata.MD, error) {
	ctx = metadata.AppendToOutgoingContext(ctx, "mode", mode)
	cs, err := s.conn.NewStream(ctx, &workDesc.Streams[0], streamMethod)
	if err != nil {
		return nil, nil, err
	}
	md, err := cs.Header()
	if err == nil && md == nil {
		err = errors.New("no header")
	}
	if err == nil {
		if _, denied := md["retry-after"]; denied {
			err = cs.RecvMsg(new(emptypb.Empty))
		}
	}
	return cs, md, err
}

// leaseLimiter returns a concurrency limiter of n leases of a minute on
// store, on a fake clock only the test moves.
func leaseLimiter(t *testing.T, store backend.Store, n int64) (*limiter.Limiter, *clock.Fake) {
	t.Helper()
	return newLimiter(t, store, limiter.Config{Algorithm: algorithms.Concurrency, Limit: n, Window: time.Minute, Prefix: "cc:"})
}

func byKey(context.Context, string) grpclimit.Key { return grpclimit.Key{Value: "k"} }

var waitFor = transporttest.WaitFor

// gatedCalls sends two rounds of 2n blocking Do calls, one at a time, the
// fake clock moving a second between rounds, and returns the most
// handlers in flight at once and the ResourceExhausted calls.
func gatedCalls(t *testing.T, s *workServer, fake *clock.Fake, n int) (maxInFlight, refused int64) {
	t.Helper()
	var no atomic.Int64
	var wg sync.WaitGroup
	sent := int64(0)
	for range 2 {
		for range 2 * n {
			sent++
			wg.Go(func() {
				if _, err := s.do(t.Context(), "block"); status.Code(err) == codes.ResourceExhausted {
					no.Add(1)
				}
			})
			waitFor(t, "a call to be served or refused", func() bool { return s.w.entered.Load()+no.Load() == sent })
		}
		fake.Advance(time.Second)
	}
	close(s.w.gate)
	wg.Wait()
	return s.w.inside.max.Load(), no.Load()
}

// TestLeaseUnaryBoundsInFlight: a concurrency limit of 3 never has more
// than 3 unary handlers in flight on a real gRPC server; the control, a
// rate limit of 3 a second, lets 6 in once a second has passed.
func TestLeaseUnaryBoundsInFlight(t *testing.T) {
	const n = 3
	lim, fake := leaseLimiter(t, nil, n)
	s := startWork(t, lim, newInterceptor(t, lim, grpclimit.WithKey(byKey)))
	maxInFlight, refused := gatedCalls(t, s, fake, n)
	require.Equal(t, int64(n), maxInFlight, "at most n in flight, and n reached")
	require.Equal(t, int64(3*n), refused)

	t.Run("control", func(t *testing.T) {
		rl, fake := newLimiter(t, nil, limiter.Config{Algorithm: algorithms.SlidingLog, Limit: n, Window: time.Second, Prefix: "rl:"})
		s := startWork(t, rl, newInterceptor(t, rl, grpclimit.WithKey(byKey)))
		maxInFlight, _ := gatedCalls(t, s, fake, n)
		require.Equal(t, int64(2*n), maxInFlight, "a rate limit does not bound the calls in flight")
	})
}

// TestLeaseUnaryReleasedOnReturn: under load from 8 clients, a limit of 2
// never has more than 2 in flight and serves far more than 2 calls (the
// clock stands still, so each lease came back when its call returned).
// The control never releases: only 2 are served.
func TestLeaseUnaryReleasedOnReturn(t *testing.T) {
	const n, clients, each = 2, 8, 25
	run := func(t *testing.T, keep bool) (maxInFlight, served int64) {
		lim, _ := leaseLimiter(t, nil, n)
		ic := newInterceptor(t, lim, grpclimit.WithKey(byKey))
		if keep {
			grpclimit.SetReleaseHook(ic, func(context.Context, *limiter.Lease) error { return nil })
		}
		s := startWork(t, lim, ic)
		var ok atomic.Int64
		var wg sync.WaitGroup
		for range clients {
			wg.Go(func() {
				for range each {
					_, err := s.do(t.Context(), "spin")
					if err == nil {
						ok.Add(1)
					} else {
						require.Equal(t, codes.ResourceExhausted, status.Code(err))
					}
				}
			})
		}
		wg.Wait()
		return s.w.inside.max.Load(), ok.Load()
	}
	maxInFlight, served := run(t, false)
	require.LessOrEqual(t, maxInFlight, int64(n))
	require.Greater(t, served, int64(n), "leases came back")
	_, served = run(t, true)
	require.Equal(t, int64(n), served, "control: leases kept")
}

// TestLeaseUnaryReleasedOnPanic: a panicking handler's lease is released
// before the panic reaches the recovery interceptor outside, and the next
// call is served. The control keeps the lease.
func TestLeaseUnaryReleasedOnPanic(t *testing.T) {
	for _, keep := range []bool{false, true} {
		lim, _ := leaseLimiter(t, nil, 1)
		ic := newInterceptor(t, lim, grpclimit.WithKey(byKey))
		if keep {
			grpclimit.SetReleaseHook(ic, func(context.Context, *limiter.Lease) error { return nil })
		}
		s := startWork(t, lim, ic)
		_, err := s.do(t.Context(), "panic")
		require.Equal(t, codes.Internal, status.Code(err))
		require.Equal(t, int64(1), s.panics.Load())
		_, err = s.do(t.Context(), "")
		if !keep {
			require.Equal(t, int64(1), s.remaining.Load(), "released before the panic went on")
			require.NoError(t, err)
		} else {
			require.Equal(t, int64(0), s.remaining.Load(), "control")
			require.Equal(t, codes.ResourceExhausted, status.Code(err), "control")
		}
	}
}

// ctxStore is the memory store refusing calls whose context has ended, as
// every network store does (the Redis clients check it before sending).
type ctxStore struct{ backend.LeaseStore }

func (s ctxStore) Release(ctx context.Context, req backend.Request, lease int64) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return s.LeaseStore.Release(ctx, req, lease)
}

// TestLeaseStream: a stream holds its lease from when it opens until it
// ends: with a limit of 2, a third stream is refused while two are open;
// one ended by its client (CloseSend) and one cancelled by its client
// each give their slot back at once (the clock stands still). The control
// releases in the call's context, as a naive interceptor would: after the
// cancel, the store refuses the ended context and the slot stays held.
func TestLeaseStream(t *testing.T) {
	for _, naive := range []bool{false, true} {
		mem, err := memorystore.New()
		require.NoError(t, err)
		lim, _ := leaseLimiter(t, ctxStore{mem}, 2)
		ic := newInterceptor(t, lim, grpclimit.WithKey(byKey))
		if naive {
			grpclimit.SetReleaseHook(ic, func(ctx context.Context, l *limiter.Lease) error { return l.Release(ctx) })
		}
		s := startWork(t, lim, ic)
		first, md, err := s.open(t.Context(), "")
		require.NoError(t, err)
		require.Equal(t, []string{`"default";q=2;qu="concurrent-requests"`}, md.Get("ratelimit-policy"))
		require.Equal(t, []string{`"default";r=1`}, md.Get("ratelimit"))
		cancelCtx, cancel := context.WithCancel(t.Context())
		_, _, err = s.open(cancelCtx, "block")
		require.NoError(t, err)
		_, md, err = s.open(t.Context(), "")
		require.Equal(t, codes.ResourceExhausted, status.Code(err), "a third stream while two are open")
		require.Equal(t, []string{`"default";r=0`}, md.Get("ratelimit"))
		_, qf := details(t, err)
		require.Equal(t, "2 concurrent requests", qf.GetViolations()[0].GetDescription())

		require.NoError(t, first.CloseSend()) // the handler reads to the end and returns
		waitFor(t, "the first stream to end", func() bool { return s.ended.Load() == 2 })
		third, _, err := s.open(t.Context(), "")
		require.NoError(t, err, "the ended stream's slot came back")
		require.NoError(t, third.CloseSend())
		waitFor(t, "the third stream to end", func() bool { return s.ended.Load() == 3 })

		cancel() // the client gives up on the blocked stream
		waitFor(t, "the cancelled stream to end", func() bool { return s.ended.Load() == 4 })
		a, _, errA := s.open(t.Context(), "")
		b, _, errB := s.open(t.Context(), "")
		if !naive {
			require.NoError(t, errA)
			require.NoError(t, errB, "the cancelled stream's slot came back")
		} else {
			require.NoError(t, errA, "control")
			require.Equal(t, codes.ResourceExhausted, status.Code(errB), "control: the cancelled stream's slot is still held")
		}
		for _, cs := range []grpc.ClientStream{a, b} {
			if cs != nil {
				_ = cs.CloseSend()
			}
		}
	}
}

// TestLeaseModeFollowsSetConfig: a limiter changed from a concurrency
// limit to a rate limit while it serves is taken with Allow from then on
// (and back): no call fails for having used the wrong method. The first
// calls show the concurrency limit in force: the lease of each comes back,
// so 3 calls pass a limit of 1; the rate limit of 1 then refuses the second.
func TestLeaseModeFollowsSetConfig(t *testing.T) {
	lim, _ := leaseLimiter(t, nil, 1)
	s := startWork(t, lim, newInterceptor(t, lim, grpclimit.WithKey(byKey)))
	for range 3 {
		_, err := s.do(t.Context(), "")
		require.NoError(t, err)
	}
	require.NoError(t, lim.SetConfig(limiter.Config{Algorithm: algorithms.SlidingLog, Limit: 1, Window: time.Minute, Prefix: "rl:"}))
	_, err := s.do(t.Context(), "")
	require.NoError(t, err)
	_, err = s.do(t.Context(), "")
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "the rate limit counts")
	require.NoError(t, lim.SetConfig(limiter.Config{Algorithm: algorithms.Concurrency, Limit: 1, Window: time.Minute, Prefix: "cc:"}))
	for range 2 {
		_, err = s.do(t.Context(), "")
		require.NoError(t, err, "a concurrency limit again")
	}
}
