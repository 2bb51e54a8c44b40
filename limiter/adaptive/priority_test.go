package adaptive

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/limitkit/limitkit/clock"
)

// fill acquires requests of class p until one is refused and returns the
// tokens.
func fill(lim *Limiter, p Priority) []*Token {
	var toks []*Token
	for {
		tok, err := lim.Acquire(context.Background(), p)
		if err != nil {
			return toks
		}
		toks = append(toks, tok)
	}
}

// checkShedOrder offers a limiter an overload in which every class asks
// for more than the limit, and checks that the lowest class is refused
// first: each class is admitted up to its share and no further, sheddable
// at the lowest concurrency, critical at the highest.
func checkShedOrder(cfg Config) error {
	lim, err := New(cfg)
	if err != nil {
		return err
	}
	var stopped []int // the in-flight count at which each class was refused
	for _, p := range []Priority{Sheddable, Default, Critical} {
		fill(lim, p)
		stopped = append(stopped, lim.InFlight())
	}
	if !(stopped[0] < stopped[1] && stopped[1] < stopped[2]) {
		return fmt.Errorf("refused at %v in flight (sheddable, default, critical); want each class refused before the next", stopped)
	}
	// The other order: once critical requests fill the limit, every class
	// is refused, and a freed slot goes to a class allowed there.
	return nil
}

func TestPrioritiesShedInOrder(t *testing.T) {
	cfg := Config{Law: Fixed{}, Initial: 20, Clock: clock.NewFake(t0)}
	require.NoError(t, checkShedOrder(cfg))
	// Control: with no share kept for the higher classes, the check sees
	// sheddable requests take what critical ones should have had.
	cfg.DefaultShare, cfg.SheddableShare = 1, 1
	require.Error(t, checkShedOrder(cfg))
}

func TestSharesAreTheLimitsOfEachClass(t *testing.T) {
	lim, err := New(Config{Law: Fixed{}, Initial: 20, Clock: clock.NewFake(t0)})
	require.NoError(t, err)
	require.Len(t, fill(lim, Sheddable), 15) // 0.75 × 20
	require.Len(t, fill(lim, Default), 3)    // up to 0.9 × 20
	require.Len(t, fill(lim, Critical), 2)   // up to 20
	require.Empty(t, fill(lim, Sheddable))
	require.Equal(t, 20, lim.InFlight())
}

// take acquires n critical slots that are free.
func take(t *testing.T, lim *Limiter, n int) []*Token {
	t.Helper()
	var toks []*Token
	for range n {
		tok, err := lim.Acquire(context.Background(), Critical)
		require.NoError(t, err)
		toks = append(toks, tok)
	}
	return toks
}

// waitFor polls cond; the test's goroutines need a moment to queue.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, time.Millisecond)
}

type got struct {
	p   Priority
	tok *Token
	err error
}

func acquireAsync(ctx context.Context, lim *Limiter, p Priority, out chan<- got) {
	go func() {
		tok, err := lim.Acquire(ctx, p)
		out <- got{p, tok, err}
	}()
}

func (l *Limiter) queuedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.queued
}

func TestQueueGrantsTheHighestClassFirstAndShedsTheLowest(t *testing.T) {
	fake := clock.NewFake(t0)
	var outcomes []Outcome
	obs := Observer{OnDecision: func(_ context.Context, d Decision) {
		if d.Outcome != Admitted {
			outcomes = append(outcomes, d.Outcome)
		}
	}}
	lim, err := New(Config{Law: Fixed{}, Initial: 4, DefaultShare: 1, SheddableShare: 1, QueueSize: 2,
		MaxWait: time.Hour, Clock: fake, Observer: obs})
	require.NoError(t, err)
	toks := take(t, lim, 4)
	out := make(chan got, 4)
	acquireAsync(context.Background(), lim, Sheddable, out)
	waitFor(t, func() bool { return lim.queuedCount() == 1 })
	acquireAsync(context.Background(), lim, Default, out)
	waitFor(t, func() bool { return lim.queuedCount() == 2 })
	// The queue is full: a critical request takes the sheddable one's
	// place, which is refused.
	acquireAsync(context.Background(), lim, Critical, out)
	shed := <-out
	require.Equal(t, Sheddable, shed.p)
	require.ErrorIs(t, shed.err, ErrLimited)
	// A freed slot goes to the critical waiter, the next to the default.
	toks[0].OnSuccess()
	first := <-out
	require.Equal(t, Critical, first.p)
	require.NoError(t, first.err)
	toks[1].OnSuccess()
	second := <-out
	require.Equal(t, Default, second.p)
	require.NoError(t, second.err)
	first.tok.OnSuccess()
	second.tok.OnSuccess()
	// A full queue with no lower class to shed refuses the newcomer.
	take(t, lim, 2)
	acquireAsync(context.Background(), lim, Critical, out)
	waitFor(t, func() bool { return lim.queuedCount() == 1 })
	acquireAsync(context.Background(), lim, Critical, out)
	waitFor(t, func() bool { return lim.queuedCount() == 2 })
	_, err = lim.Acquire(context.Background(), Critical)
	require.ErrorIs(t, err, ErrLimited)
	require.Equal(t, []Outcome{Shed, Queued, Queued, Rejected}, outcomes[:4])
}

func TestQueueDropsBeforeTheDeadline(t *testing.T) {
	fake := clock.NewFake(t0)
	lim, err := New(Config{Law: Fixed{}, Initial: 1, Window: time.Nanosecond, MinSamples: 1, QueueSize: 4,
		MaxWait: time.Hour, Clock: fake})
	require.NoError(t, err)
	// One window measures a latency of 1 s.
	tok, err := lim.Acquire(context.Background(), Critical)
	require.NoError(t, err)
	fake.Advance(time.Second)
	tok.OnSuccess()
	held, err := lim.Acquire(context.Background(), Critical)
	require.NoError(t, err)

	// The context follows the real clock: set the fake one 10 s before
	// its deadline. The request must give up at 9 s, the deadline less
	// the latency, while its caller can still be answered.
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel()
	dl, _ := ctx.Deadline()
	fake.Set(dl.Add(-10 * time.Second))
	out := make(chan got, 1)
	acquireAsync(ctx, lim, Critical, out)
	waitFor(t, func() bool { return fake.Waiters() == 1 })
	fake.Advance(9*time.Second - time.Millisecond)
	select {
	case g := <-out:
		t.Fatalf("the request gave up %v before the deadline less the latency: %v", time.Millisecond, g.err)
	case <-time.After(20 * time.Millisecond):
	}
	fake.Advance(time.Millisecond)
	g := <-out
	require.ErrorIs(t, g.err, ErrLimited)
	require.NoError(t, ctx.Err(), "dropped before its deadline")
	held.OnSuccess()

	// A request whose deadline leaves less than the latency is refused at
	// once, without waiting.
	held, err = lim.Acquire(context.Background(), Critical)
	require.NoError(t, err)
	short, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(time.Hour))
	defer cancel2()
	dl, _ = short.Deadline()
	fake.Set(dl.Add(-time.Second / 2))
	_, err = lim.Acquire(short, Critical)
	require.ErrorIs(t, err, ErrLimited)
	require.Zero(t, fake.Waiters())
	held.OnSuccess()
}

func TestTokenReleasesOnce(t *testing.T) {
	lim, err := New(Config{Law: Fixed{}, Initial: 2, Clock: clock.NewFake(t0)})
	require.NoError(t, err)
	tok, err := lim.Acquire(context.Background(), Critical)
	require.NoError(t, err)
	tok.OnSuccess()
	tok.OnDropped()
	tok.OnIgnore()
	require.Zero(t, lim.InFlight())
	var nilTok *Token
	nilTok.OnSuccess() // no panic
}
