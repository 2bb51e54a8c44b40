package fallback

import (
	"context"
	"log/slog"
	"time"

	"github.com/limitkit/limitkit/backend"
)

// queue records a state change of b. gobreaker calls it with its lock
// held, so it only appends; deliver runs the hook and the log later,
// lock-free.
func (s *shared) queue(b *breaker, from, to backend.BreakerState) {
	now := time.Now()
	var cause error
	if to == backend.BreakerOpen {
		b.openedAt.Store(now.UnixNano())
		if s.base != nil {
			s.base.outages.Add(1)
		}
		if p := b.lastErr.Load(); p != nil {
			cause = *p
		}
	}
	s.eventsMu.Lock()
	s.events = append(s.events, backend.StateChange{From: from, To: to, At: now, Cause: cause, Node: b.node})
	s.eventsMu.Unlock()
	s.pending.Add(1)
}

// deliver passes queued state changes to the log and the hook, in order, one
// deliverer at a time.
func (s *shared) deliver() {
	for s.pending.Load() > 0 {
		if !s.delivering.TryLock() {
			return // another goroutine is delivering; it will see ours
		}
		s.eventsMu.Lock()
		events := s.events
		s.events = nil
		s.pending.Add(-int32(len(events)))
		s.eventsMu.Unlock()
		for _, e := range events {
			level := slog.LevelInfo
			if e.To == backend.BreakerOpen {
				level = slog.LevelWarn
			}
			attrs := []any{"breaker", s.cfg.name, "from", string(e.From), "to", string(e.To)}
			if e.Cause != nil {
				attrs = append(attrs, "cause", e.Cause.Error())
			}
			if e.Node != "" {
				attrs = append(attrs, "node", e.Node)
			}
			s.cfg.logger.Log(context.Background(), level, "limitkit: circuit breaker state changed", attrs...)
			if s.cfg.hook != nil {
				s.cfg.hook(e)
			}
		}
		s.delivering.Unlock()
	}
}
