package fallback_test

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend"
	"github.com/limitkit/limitkit/backend/goredisstore"
	"github.com/limitkit/limitkit/fallback"
)

// honouring is a primary that honours its context (it says so), answers
// admitted, and reports whether each call ran on its caller's goroutine:
// the stack of the call holds the caller's frame, marker.
type honouring struct {
	backend.Store
	marker string
	hang   bool

	mu          sync.Mutex
	calls       int
	sameStack   int
	hadDeadline int
}

func (h *honouring) HonoursContext() bool { return true }

func (h *honouring) Take(ctx context.Context, req backend.Request) (backend.Result, error) {
	buf := make([]byte, 64<<10)
	stack := string(buf[:runtime.Stack(buf, false)])
	_, dl := ctx.Deadline()
	h.mu.Lock()
	h.calls++
	if strings.Contains(stack, h.marker) {
		h.sameStack++
	}
	if dl {
		h.hadDeadline++
	}
	h.mu.Unlock()
	if h.hang {
		<-ctx.Done()
		return backend.Result{}, ctx.Err()
	}
	return backend.Result{Allowed: true, Limit: req.Rule.Limit}, nil
}

// TestPrimaryThatHonoursContextIsCalledDirectly: fallback calls a primary
// that honours its context on the caller's goroutine, with the deadline on
// the context, and a hung call still ends at the deadline, degraded.
func TestPrimaryThatHonoursContextIsCalledDirectly(t *testing.T) {
	p := &honouring{Store: newFlaky(t), marker: "TestPrimaryThatHonoursContextIsCalledDirectly"}
	s := newStore(t, p, fallback.WithTimeout(20*time.Millisecond))
	res, err := s.Take(t.Context(), req("a"))
	require.NoError(t, err)
	require.False(t, res.Degraded)
	p.hang = true
	res, err = s.Take(t.Context(), req("a"))
	require.NoError(t, err)
	require.True(t, res.Degraded)
	require.Equal(t, 2, p.calls)
	require.Equal(t, 2, p.hadDeadline, "a call without the deadline on its context")
	require.Equal(t, 2, p.sameStack, "a call ran on another goroutine than its caller's")
}

// TestHungPrimaryCannotPileUpGoroutines: a primary that ignores its
// context and never returns costs at most 256 goroutines (plus one per
// caller that started a call as the 256th was abandoned: 8 callers here)
// however many calls time out on it; the calls beyond that fail at once.
// Before the bound, each of the 1,000 calls left a goroutine behind.
func TestHungPrimaryCannotPileUpGoroutines(t *testing.T) {
	p := newFlaky(t)
	p.mode.Store(hanging)
	// The breaker never opens here, so every call goes to the primary.
	s := newStore(t, p, fallback.WithTimeout(time.Millisecond), fallback.WithFailureThreshold(1_000_000))
	before := runtime.NumGoroutine()
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 125 {
				res, err := s.Take(t.Context(), req("a"))
				if err != nil || !res.Degraded {
					t.Errorf("Take on a hung primary: %+v, %v", res, err)
					return
				}
			}
		})
	}
	wg.Wait()
	grown := runtime.NumGoroutine() - before
	t.Logf("1000 calls on a hung primary: %d goroutines more, %d calls reached it", grown, p.calls.Load())
	require.LessOrEqual(t, grown, 256+8+8, "goroutines piled up")
	require.LessOrEqual(t, p.calls.Load(), int64(256+8), "calls beyond the bound reached the hung primary")
	require.Equal(t, uint64(1000), s.Stats().PrimaryFailures)
}

// TestGoRedisWithContextTimeoutHonoursContext: the go-redis store says it
// honours contexts exactly when its client has ContextTimeoutEnabled.
func TestGoRedisWithContextTimeoutHonoursContext(t *testing.T) {
	mr := miniredis.RunT(t)
	for _, enabled := range []bool{false, true} {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr(), ContextTimeoutEnabled: enabled})
		t.Cleanup(func() { _ = c.Close() })
		gs, err := goredisstore.New(c)
		require.NoError(t, err)
		require.Equal(t, enabled, gs.HonoursContext())
	}
}
