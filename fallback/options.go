package fallback

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/limitkit/limitkit/backend"
)

// Defaults of the options.
const (
	// DefaultTimeout bounds each primary call (a half-open breaker's
	// probes get twice as long).
	DefaultTimeout = 100 * time.Millisecond
	// DefaultFailureThreshold is the number of consecutive failure events
	// that opens the breaker. Failures of calls that were in flight
	// together count as one event (see WithFailureThreshold).
	DefaultFailureThreshold = 3
	// DefaultOpenTimeout is how long the breaker stays open before
	// probing: short, so that a primary back from a blip is used again
	// soon; probes are few (DefaultProbes), so probing a primary that is
	// still down costs little.
	DefaultOpenTimeout = 250 * time.Millisecond
	// DefaultProbes is the number of requests let through while half-open;
	// that many consecutive successes close the breaker.
	DefaultProbes = 3
)

// ErrUnavailable is wrapped by the errors of calls that have no local
// answer (Reset) when the primary could not be reached.
var ErrUnavailable = errors.New("fallback: primary store unavailable")

// Option configures a Store.
type Option func(*config) error

type config struct {
	timeout     time.Duration
	timeoutSet  bool
	threshold   uint32
	openTimeout time.Duration
	probes      uint32
	policy      backend.FailurePolicy
	local       backend.Store
	hook        func(backend.StateChange)
	logger      *slog.Logger
	name        string
	baselines   int
}

// WithTimeout bounds each primary call (default DefaultTimeout; over a
// primary that waits for replica acknowledgement, its wait plus
// DefaultTimeout). New refuses a timeout that leaves less than AckHeadroom
// after such a wait.
func WithTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("fallback: timeout is %v; it must be positive", d)
		}
		c.timeout, c.timeoutSet = d, true
		return nil
	}
}

// WithFailureThreshold sets how many consecutive primary failure events
// open the breaker (default DefaultFailureThreshold). A failure is one
// event with every other failure of a call in flight at the same time:
// the 16 callers caught in one slow batch count once, and a primary that
// keeps failing counts once per round of calls (each caller's next call
// starts after its last failure). A success in between starts the count
// again.
func WithFailureThreshold(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("fallback: failure threshold is %d; it must be at least 1", n)
		}
		c.threshold = uint32(n)
		return nil
	}
}

// WithOpenTimeout sets how long the breaker stays open before it probes the
// primary again (default DefaultOpenTimeout).
func WithOpenTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("fallback: open timeout is %v; it must be positive", d)
		}
		c.openTimeout = d
		return nil
	}
}

// WithProbes sets how many requests go to the primary while half-open, and
// how many consecutive successes close the breaker (default DefaultProbes).
func WithProbes(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return fmt.Errorf("fallback: probes is %d; it must be at least 1", n)
		}
		c.probes = uint32(n)
		return nil
	}
}

// WithPolicy sets the policy of the returned Store (default backend.LocalPolicy(1)).
// Store.Policy gives views with other policies.
func WithPolicy(p backend.FailurePolicy) Option {
	return func(c *config) error {
		if p.Mode() == backend.ModeUnset {
			p = backend.LocalPolicy(1)
		}
		c.policy = p
		return nil
	}
}

// WithLocalStore sets the store that Local policies decide on (default: a
// new memorystore with its defaults).
func WithLocalStore(s backend.Store) Option {
	return func(c *config) error {
		if s == nil {
			return errors.New("fallback: local store is nil")
		}
		c.local = s
		return nil
	}
}

// WithStateHook calls fn on every breaker state change, in order, outside
// the breaker's lock.
func WithStateHook(fn func(backend.StateChange)) Option {
	return func(c *config) error {
		c.hook = fn
		return nil
	}
}

// WithLogger logs state changes to l (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return errors.New("fallback: logger is nil")
		}
		c.logger = l
		return nil
	}
}

// WithName names the breaker in logs (default "limitkit").
func WithName(name string) Option {
	return func(c *config) error {
		c.name = name
		return nil
	}
}

// WithBaselines sets how many keys the store remembers the primary's last
// answer for (default DefaultBaselines; the least recently used is
// forgotten first). While the primary is unavailable a local policy
// decides a remembered key from that answer: a key the primary last
// reported spent stays refused until its reset, one with r units left
// admits at most floor(r/n) under LocalPolicy(n). A forgotten key, or any
// key with 0 here, is decided from the policy's share of a fresh limit.
// Each entry costs about 200 bytes beside its key's prefix and id.
func WithBaselines(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("fallback: baselines is %d; give 0 (remember none) or more", n)
		}
		c.baselines = n
		return nil
	}
}
