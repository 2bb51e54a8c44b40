package httplimit

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/backend/memorystore"
	"github.com/limitkit/limitkit/limiter"
)

// TestReloadToAndFromConcurrency (issue 22, defect 7): while one goroutine
// switches the limit between "concurrency" and "fixed_window" as fast as it
// can, no request in flight is answered 400 (the middleware chose Acquire
// or Allow from one configuration, the limiter decided by another). Neither
// limit ever denies here, so every request must be served. Bounded: 4
// workers x 4,000 requests, or 20 s.
func TestReloadToAndFromConcurrency(t *testing.T) {
	store, err := memorystore.New()
	require.NoError(t, err)
	lease := limiter.Config{Algorithm: "concurrency", Limit: 1000, Window: time.Minute, Prefix: "rl:"}
	rate := limiter.Config{Algorithm: "fixed_window", Limit: 1 << 40, Window: time.Hour, Prefix: "rl:"}
	lim, err := limiter.New(store, lease)
	require.NoError(t, err)
	mw, err := New(lim)
	require.NoError(t, err)
	var served atomic.Int64
	h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))

	done := make(chan struct{})
	var flips atomic.Int64
	go func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			cfg := rate
			if i%2 == 1 {
				cfg = lease
			}
			if err := lim.SetConfig(cfg); err != nil {
				panic(err)
			}
			flips.Add(1)
		}
	}()
	const workers, each = 4, 4000
	deadline := time.Now().Add(20 * time.Second)
	var bad atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := 0; i < each && time.Now().Before(deadline); i++ {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.RemoteAddr = "192.0.2.1:1"
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK {
					bad.Add(1)
				}
			}
		})
	}
	wg.Wait()
	close(done)
	t.Logf("%d requests served across %d configuration changes", served.Load(), flips.Load())
	require.Positive(t, flips.Load(), "the configuration never changed: the test proved nothing")
	require.Zero(t, bad.Load(), "requests failed by a reload to or from concurrency")
}
