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

// Option configures New. Options apply in order; a nil Option is ignored.
type Option func(*options) error

// options are what the Options set, over the defaults New gives.
type options struct {
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
	return func(c *options) error {
		if d <= 0 {
			return fmt.Errorf("WithTimeout: the timeout is %v; give a positive duration", d)
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
	return func(c *options) error {
		if n < 1 {
			return fmt.Errorf("WithFailureThreshold: the threshold is %d; give 1 or more", n)
		}
		c.threshold = uint32(n)
		return nil
	}
}

// WithOpenTimeout sets how long the breaker stays open before it probes the
// primary again (default DefaultOpenTimeout).
func WithOpenTimeout(d time.Duration) Option {
	return func(c *options) error {
		if d <= 0 {
			return fmt.Errorf("WithOpenTimeout: the open timeout is %v; give a positive duration", d)
		}
		c.openTimeout = d
		return nil
	}
}

// WithProbes sets how many requests go to the primary while half-open, and
// how many consecutive successes close the breaker (default DefaultProbes).
func WithProbes(n int) Option {
	return func(c *options) error {
		if n < 1 {
			return fmt.Errorf("WithProbes: the probe count is %d; give 1 or more", n)
		}
		c.probes = uint32(n)
		return nil
	}
}

// WithPolicy sets the policy of the returned Store (default backend.LocalPolicy(1)).
// Store.Policy gives views with other policies.
func WithPolicy(p backend.FailurePolicy) Option {
	return func(c *options) error {
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
	return func(c *options) error {
		if s == nil {
			return errors.New("WithLocalStore: the store is nil; pass a backend.Store, or leave the option out for a memorystore")
		}
		c.local = s
		return nil
	}
}

// WithStateHook calls fn on every breaker state change, in order, outside
// the breaker's lock.
func WithStateHook(fn func(backend.StateChange)) Option {
	return func(c *options) error {
		c.hook = fn
		return nil
	}
}

// WithLogger logs state changes to l (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *options) error {
		if l == nil {
			return errors.New("WithLogger: the logger is nil; pass a *slog.Logger, or leave the option out for slog.Default()")
		}
		c.logger = l
		return nil
	}
}

// WithName names the breaker in logs (default "limitkit").
func WithName(name string) Option {
	return func(c *options) error {
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
	return func(c *options) error {
		if n < 0 {
			return fmt.Errorf("WithBaselines: the count is %d; give 0 (remember none) or more", n)
		}
		c.baselines = n
		return nil
	}
}
