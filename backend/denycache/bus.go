package denycache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/backend"
)

// Bus carries invalidations between the processes that share a store.
// goredisstore.NewBus and rueidisstore.NewBus implement it over Redis
// pub/sub.
type Bus interface {
	// Publish sends msg to every listener of channel, this process's too.
	Publish(ctx context.Context, channel, msg string) error
	// Listen calls fn with every message published to channel until ctx
	// ends or the subscription fails; it returns why it stopped.
	Listen(ctx context.Context, channel string, fn func(msg string)) error
}

// DefaultChannel is the pub/sub channel invalidations travel on.
const DefaultChannel = "limitkit:denycache"

// The messages on the channel, fields joined by NUL bytes:
//
//	k alg prefix id                      a key was reset or given units back
//	p nonce                              a probe
//	r proc alg limit window time prefix  a rule is written under (sightings.go)

// announce publishes an invalidation of key under alg.
func (s *Store) announce(ctx context.Context, key backend.Key, alg algorithms.Name) error {
	if s.bus == nil {
		return nil
	}
	if err := s.bus.Publish(context.WithoutCancel(ctx), s.opts.channel, keyMessage(key, alg)); err != nil {
		return fmt.Errorf("denycache: other processes' caches were not told of the key's reset or refund (they may deny it until its retry time): %w", err)
	}
	return nil
}

func keyMessage(key backend.Key, alg algorithms.Name) string {
	return "k\x00" + string(alg) + "\x00" + key.Prefix + "\x00" + key.ID
}

// post queues msg for send, or drops and counts it when the queue is full.
func (s *Store) post(msg string) {
	if s.bus == nil {
		return
	}
	select {
	case s.outbox <- msg:
	default:
		s.pubDropped.Add(1)
	}
}

// send publishes the queued messages in order until ctx ends, each within
// a probe interval, warning of failures at most once an interval.
func (s *Store) send(ctx context.Context) {
	for {
		var msg string
		select {
		case <-ctx.Done():
			return
		case msg = <-s.outbox:
		}
		pctx, cancel := context.WithTimeout(ctx, s.opts.probe)
		err := s.bus.Publish(pctx, s.opts.channel, msg)
		cancel()
		if err == nil || ctx.Err() != nil {
			continue
		}
		s.pubFailed.Add(1)
		now, last := s.mono(), s.lastPubWarning.Load()
		if now-last >= s.opts.probe.Milliseconds() && s.lastPubWarning.CompareAndSwap(last, now) {
			s.opts.logger.Warn("limitkit: deny cache could not tell other processes of a write, reset or refund (their cached denials may outlive the store's)", "err", err)
		}
	}
}

// handle applies one message from the bus.
func (s *Store) handle(msg string) {
	kind, rest, ok := strings.Cut(msg, "\x00")
	if !ok {
		return
	}
	switch kind {
	case "p":
		select {
		case s.probes <- rest:
		default: // the probe loop is behind; it will send another
		}
	case "r":
		s.heard(rest)
	case "k":
		alg, rest, ok1 := strings.Cut(rest, "\x00")
		prefix, id, ok2 := strings.Cut(rest, "\x00")
		if ok1 && ok2 {
			s.invalidate(backend.Key{Prefix: prefix, ID: id}, algorithms.Name(alg))
		}
	}
}

// listen keeps the subscription up. The cache answers only while a probe
// it sent has come back since the last probe interval began.
func (s *Store) listen(ctx context.Context) {
	defer close(s.done)
	backoff := 50 * time.Millisecond
	for ctx.Err() == nil {
		subCtx, stop := context.WithCancel(ctx)
		failed := make(chan error, 1)
		go func() { failed <- s.bus.Listen(subCtx, s.opts.channel, s.handle) }()
		ok := s.probeLoop(subCtx, failed)
		stop()
		s.stopAnswering()
		if ok {
			backoff = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// probeLoop sends a probe every interval while the subscription lasts, and
// renews this process's rule sightings.
// The cache answers from when a probe comes back until one does not within
// an interval. It returns whether the subscription was ever confirmed.
func (s *Store) probeLoop(ctx context.Context, failed <-chan error) bool {
	confirmed := false
	// Until a probe has come back the subscription may not be in place
	// yet: probe again soon, backing off to the interval.
	interval := min(10*time.Millisecond, s.opts.probe)
	for {
		nonce := newNonce()
		sent := time.Now()
		if err := s.bus.Publish(ctx, s.opts.channel, "p\x00"+nonce); err != nil && ctx.Err() == nil {
			s.opts.logger.Warn("limitkit: deny cache probe failed; not answering from memory", "err", err)
		}
		timeout := time.NewTimer(interval)
		heard := false
	wait:
		for {
			select {
			case <-ctx.Done():
				timeout.Stop()
				return confirmed
			case err := <-failed:
				timeout.Stop()
				s.subscriptionEnded(ctx, err)
				return confirmed
			case got := <-s.probes:
				if got == nonce {
					heard = true
					break wait
				}
			case <-timeout.C:
				break wait
			}
		}
		timeout.Stop()
		if heard {
			confirmed = true
			interval = s.opts.probe
			if !s.listening.Load() {
				s.flush()
				s.listening.Store(true)
			}
		} else {
			// The probe did not come back: messages may have been lost.
			s.stopAnswering()
			if !confirmed {
				interval = min(2*interval, s.opts.probe)
			}
		}
		s.renew(ctx)
		select {
		case <-ctx.Done():
			return confirmed
		case err := <-failed:
			s.subscriptionEnded(ctx, err)
			return confirmed
		case <-time.After(max(interval-time.Since(sent), 0)):
		}
	}
}

func (s *Store) subscriptionEnded(ctx context.Context, err error) {
	if ctx.Err() == nil {
		s.opts.logger.Warn("limitkit: deny cache subscription ended; not answering from memory", "err", err)
	}
}

func newNonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
