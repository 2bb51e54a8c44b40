package clock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// offsetSamples is how many probes one measurement takes; the one with the
// shortest round trip wins, as its midpoint is the tightest estimate.
const offsetSamples = 3

// Offset is a Clock that reads a local clock corrected by its measured
// offset to a remote time source, typically the Redis server's TIME (see
// goredisstore.ServerTime and rueidisstore.ServerTime). Processes whose
// clocks disagree then agree to within their round trips to the source,
// while each decision still reads a local clock (no round trip per request)
// and tests can still drive the stores with any Clock.
//
// The offset is measured as remote - (t0+t1)/2, where t0 and t1 are the
// local times around a probe: half the round trip is assumed each way, so
// the error is at most half the round trip. Each measurement keeps the
// fastest of a few probes. A refresh that fails keeps the last offset and
// is reported by Err.
//
// When the offset is re-measured the clock can step back by the change,
// as a system clock does under NTP; every algorithm handles a clock going
// back. Offset is safe for concurrent use. Close stops its refresh
// goroutine.
type Offset struct {
	base    Clock
	probe   func(context.Context) (time.Time, error)
	refresh time.Duration

	offset atomic.Int64 // nanoseconds
	mu     sync.Mutex
	err    error

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
}

// NewOffset measures base's offset to probe's time source (bounded by ctx)
// and returns a clock that reads base plus that offset. A nil base is
// System. When refresh is positive, the offset is measured again every
// refresh (each measurement bounded by refresh) in a goroutine that runs
// until Close. It returns the probe's error when the first measurement
// fails.
func NewOffset(ctx context.Context, base Clock, probe func(context.Context) (time.Time, error), refresh time.Duration) (*Offset, error) {
	if probe == nil {
		return nil, errors.New("clock: NewOffset: probe is nil")
	}
	if refresh < 0 {
		return nil, fmt.Errorf("clock: NewOffset: refresh is %v; it must not be negative", refresh)
	}
	if base == nil {
		base = System
	}
	o := &Offset{base: base, probe: probe, refresh: refresh, done: make(chan struct{})}
	if err := o.Refresh(ctx); err != nil {
		return nil, err
	}
	if refresh == 0 {
		close(o.done)
		o.stop = func() {}
		return o, nil
	}
	loop, stop := context.WithCancel(context.Background())
	o.stop = stop
	go o.run(loop)
	return o, nil
}

func (o *Offset) run(ctx context.Context) {
	defer close(o.done)
	t := time.NewTicker(o.refresh)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			mctx, cancel := context.WithTimeout(ctx, o.refresh)
			_ = o.Refresh(mctx) // recorded for Err
			cancel()
		}
	}
}

// Now returns base's time plus the offset.
func (o *Offset) Now() time.Time {
	return o.base.Now().Add(time.Duration(o.offset.Load()))
}

// Offset returns the current offset: remote time minus base time.
func (o *Offset) Offset() time.Duration { return time.Duration(o.offset.Load()) }

// Err returns the error of the last measurement, nil when it succeeded.
func (o *Offset) Err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// Refresh measures the offset now. On error the offset is left as it was.
func (o *Offset) Refresh(ctx context.Context) error {
	var best, bestRTT time.Duration
	var err error
	ok := false
	for range offsetSamples {
		t0 := o.base.Now()
		remote, perr := o.probe(ctx)
		t1 := o.base.Now()
		if perr != nil {
			err = perr
			if ctx.Err() != nil {
				break
			}
			continue
		}
		rtt := max(t1.Sub(t0), 0)
		if !ok || rtt < bestRTT {
			best, bestRTT, ok = remote.Sub(t0.Add(rtt/2)), rtt, true
		}
	}
	if ok {
		err = nil
		o.offset.Store(int64(best))
	} else {
		err = fmt.Errorf("clock: measuring the offset: %w", err)
	}
	o.mu.Lock()
	o.err = err
	o.mu.Unlock()
	return err
}

// Close stops the refresh goroutine and waits for it to exit. The clock
// keeps reading base plus the last offset. Close is idempotent.
func (o *Offset) Close() error {
	o.closeOnce.Do(o.stop)
	<-o.done
	return nil
}

var _ Clock = (*Offset)(nil)
