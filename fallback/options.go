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
	// DefaultTimeout bounds each primary call.
	DefaultTimeout = 100 * time.Millisecond
	// DefaultFailureThreshold is the number of consecutive failures that
	// opens the breaker.
	DefaultFailureThreshold = 5
	// DefaultOpenTimeout is how long the breaker stays open before probing.
	DefaultOpenTimeout = 2 * time.Second
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

// WithFailureThreshold sets how many consecutive primary failures open the
// breaker (default DefaultFailureThreshold).
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
