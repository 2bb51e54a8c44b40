package fallback

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// callerError marks an error caused by the caller (its context ended, or its
// request was invalid): it does not count against the primary.
type callerError struct{ err error }

func (e callerError) Error() string { return e.err.Error() }
func (e callerError) Unwrap() error { return e.err }

// errMissedDeadline is wrapped by the error of a primary call that did not
// answer within its deadline: a call that may still reach the primary.
var errMissedDeadline = errors.New("fallback: primary did not answer in time")

// sameEvent marks a failure of a call that was in flight when another
// failure was counted: one slow batch, one stall or one broken connection
// seen by many callers at once. It is not counted again (see execute).
type sameEvent struct{ err error }

func (e sameEvent) Error() string { return e.err.Error() }
func (e sameEvent) Unwrap() error { return e.err }

// execute runs fn on the primary through breaker b, within the deadline.
//
// The breaker counts failures by event, not by caller: a failure counts
// only when no other was counted while its call was in flight. Callers
// caught together in one slow batch count once; a primary that keeps
// failing counts once per round of calls. A probe's failure always counts
// (it reopens the breaker). A probe (half-open) gets twice
// the deadline: it decides whether the primary is back, and a loaded
// machine answering a little late should not keep it away.
func (s *shared) execute(ctx context.Context, b *breaker, fn func(context.Context) (backend.Result, error)) (backend.Result, error) {
	return s.executeProbed(ctx, b, fn, nil)
}

// executeProbed is execute, with probe (nil: none) a read-only call of the
// same key. A call its caller abandoned (its context ended first) is not
// the primary's failure: the caller may give up for reasons of its own.
// But a stall would then never open the breaker when callers' deadlines
// are shorter than the store's (Envoy's 20 ms against 100 ms), so the
// abandonment starts probe in the background, with the store's deadline,
// and counts its outcome: a primary that answers it (a fast cancellation,
// a healthy Redis) counts nothing; a stalled one fails it. One probe runs
// per breaker at a time, so abandonments cost at most one call in flight.
func (s *shared) executeProbed(ctx context.Context, b *breaker, fn, probe func(context.Context) (backend.Result, error)) (backend.Result, error) {
	res, err := s.executeOnce(ctx, b, fn)
	if probe != nil && ctx.Err() != nil && !skipAbandonProbe && b.abandonProbe.CompareAndSwap(false, true) {
		if _, byCaller := errors.AsType[callerError](err); byCaller {
			go func() {
				defer b.abandonProbe.Store(false)
				_, _ = s.executeOnce(context.WithoutCancel(ctx), b, probe)
			}()
		} else {
			b.abandonProbe.Store(false)
		}
	}
	return res, err
}

// skipAbandonProbe turns the probes of abandoned calls off: a control.
var skipAbandonProbe = false

// executeOnce is execute without the probe of abandoned calls.
func (s *shared) executeOnce(ctx context.Context, b *breaker, fn func(context.Context) (backend.Result, error)) (backend.Result, error) {
	res, err := b.cb.Execute(func() (backend.Result, error) {
		epoch := b.epoch.Load()
		probe := b.probing.Load()
		timeout := s.cfg.timeout
		if probe {
			timeout *= probeDeadlineFactor
		}
		res, err := s.withDeadline(ctx, timeout, fn)
		if _, byCaller := errors.AsType[callerError](err); err != nil && !byCaller {
			s.failures.Add(1)
			b.failures.Add(1)
			b.lastErr.Store(&err)
			// A failed probe always counts: it reopens the breaker.
			if !b.epoch.CompareAndSwap(epoch, epoch+1) && !probe {
				return res, sameEvent{err}
			}
		}
		return res, err
	})
	s.deliver()
	return res, err
}

// probeDeadlineFactor multiplies the deadline of a half-open breaker's
// probes.
const probeDeadlineFactor = 2

// withDeadline runs fn within timeout. When the primary honours its
// context (see backend.ContextHonourer) fn runs in the caller's goroutine on a
// context with the timeout: no goroutine, channel or timer of its own.
// Otherwise fn runs in a goroutine the caller stops waiting for after the
// timeout; once maxAbandoned such calls are still running past their
// deadline, calls fail at once (as primary failures) until some return, so
// a hung client cannot pile goroutines up (at most maxAbandoned, plus one
// per caller that started as the last slot went).
func (s *shared) withDeadline(ctx context.Context, timeout time.Duration, fn func(context.Context) (backend.Result, error)) (backend.Result, error) {
	callCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var res backend.Result
	var err error
	if s.direct {
		res, err = fn(callCtx)
	} else {
		res, err = s.bounded(callCtx, fn)
	}
	switch {
	case err == nil:
		return res, nil
	case ctx.Err() != nil:
		return res, callerError{ctx.Err()}
	case errors.Is(err, algorithms.ErrInvalidRequest), errors.Is(err, algorithms.ErrInvalidRule):
		return res, callerError{err}
	case callCtx.Err() != nil:
		return backend.Result{}, fmt.Errorf("%w (within %v): %w", errMissedDeadline, timeout, err)
	}
	return res, err
}

// maxAbandoned bounds the calls to a primary that does not honour its
// context still running after their caller stopped waiting.
const maxAbandoned = 256

// errTooManyAbandoned fails calls while maxAbandoned calls still run.
var errTooManyAbandoned = fmt.Errorf("fallback: %d primary calls are still running past their deadline; "+
	"give the client a timeout it enforces (go-redis: ContextTimeoutEnabled)", maxAbandoned)

// The states of a call run by bounded.
const (
	callRunning int32 = iota
	callDone
	callAbandoned
)

// bounded runs fn in a goroutine and waits for it until ctx ends.
func (s *shared) bounded(ctx context.Context, fn func(context.Context) (backend.Result, error)) (backend.Result, error) {
	if s.abandoned.Load() >= maxAbandoned {
		return backend.Result{}, errTooManyAbandoned
	}
	type outcome struct {
		res backend.Result
		err error
	}
	done := make(chan outcome, 1)
	state := new(atomic.Int32)
	go func() {
		res, err := fn(ctx)
		done <- outcome{res, err}
		if !state.CompareAndSwap(callRunning, callDone) {
			s.abandoned.Add(-1) // its caller left: no longer running
		}
	}()
	select {
	case o := <-done:
		return o.res, o.err
	case <-ctx.Done():
		if state.CompareAndSwap(callRunning, callAbandoned) {
			s.abandoned.Add(1)
			return backend.Result{}, ctx.Err()
		}
		o := <-done // it finished meanwhile
		return o.res, o.err
	}
}

// honoursContext reports whether s, or a store it wraps, honours contexts
// (backend.ContextHonourer).
func honoursContext(s backend.Store) bool {
	h, ok := backend.As[backend.ContextHonourer](s)
	return ok && h.HonoursContext()
}
