package benchmarks

import (
	"context"
	"fmt"
	"time"

	"github.com/limitkit/limitkit/internal/dev/benchmarks/harness"
)

// RedisSample is one measured Redis cell: RunFor's counts and what the
// client process and the server spent on them.
type RedisSample struct {
	RunResult
	harness.Usage
}

// PerDecision divides v by the cell's decisions.
func (s RedisSample) PerDecision(v float64) float64 {
	if s.Decisions == 0 {
		return 0
	}
	return v / float64(s.Decisions)
}

// MeasureRedis runs cell for d from callers goroutines against srv and
// measures it with harness.Measure: the server's statistics are reset just
// before and read just after, so the cell's warm-up (see Warm) is not in
// them.
func MeasureRedis(ctx context.Context, cell *Cell, srv *harness.Server, callers int, d time.Duration) (RedisSample, error) {
	var r RunResult
	u, err := harness.Measure(ctx, srv, func() { r = cell.RunFor(ctx, callers, d) })
	if err != nil {
		return RedisSample{}, err
	}
	if r.Decisions == 0 {
		return RedisSample{}, fmt.Errorf("%s %s: no decision in %v", cell.Contender.Name, cell.Workload, d)
	}
	return RedisSample{RunResult: r, Usage: u}, nil
}

// Warm runs cell's own workload for d from callers goroutines, not
// measured: every connection of the client is in use by the end (go-redis
// pools are also dialled in full when the client is made) and keys hold
// their steady-state contents: a log holds the last LogWindow of requests
// when d is at least that long, and a deny-heavy key stays spent.
func Warm(ctx context.Context, cell *Cell, callers int, d time.Duration) error {
	r := cell.RunFor(ctx, callers, d)
	if r.Errors > 0 {
		return fmt.Errorf("%s %s: warm-up: %d of %d decisions failed, first: %w", cell.Contender.Name, cell.Workload, r.Errors, r.Decisions, cell.FirstError())
	}
	return nil
}
