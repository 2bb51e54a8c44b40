package benchmarks

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// RedisSample is one measured Redis cell: RunFor's counts and what the
// client process and the server spent on them.
type RedisSample struct {
	RunResult
	// Mallocs and Bytes are the client process's heap allocations
	// (runtime.MemStats deltas) over the cell, every goroutine included.
	Mallocs, Bytes uint64
	// ScriptCalls and ScriptUsec are the server's EVALSHA and EVAL calls
	// (and their _RO forms) and the µs it spent in them (INFO
	// commandstats deltas); Commands counts every command it ran, those
	// inside scripts included, control commands excluded.
	ScriptCalls, ScriptUsec, Commands int64
	// InfoCPU is the server's CPU time by INFO cpu; ProcCPU by
	// /proc/PID/stat (0 where there is no /proc).
	InfoCPU, ProcCPU time.Duration
}

// PerDecision divides v by the cell's decisions.
func (s RedisSample) PerDecision(v float64) float64 {
	if s.Decisions == 0 {
		return 0
	}
	return v / float64(s.Decisions)
}

// controlCommands are the commands the harness and the clients' handshakes
// send, which are not counted as the contenders' work.
var controlCommands = map[string]bool{
	"info": true, "config|resetstat": true, "config": true, "ping": true, "hello": true,
	"client|setinfo": true, "client": true, "script|load": true, "script": true, "select": true,
}

// scriptCommands are the commands that run a script.
var scriptCommands = []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}

// MeasureRedis runs cell for d from callers goroutines against srv and
// measures it: the server's statistics are reset just before and read just
// after, so the cell's warm-up (see Warm) is not in them.
func MeasureRedis(ctx context.Context, cell *Cell, srv *Server, callers int, d time.Duration) (RedisSample, error) {
	if err := srv.ResetStats(ctx); err != nil {
		return RedisSample{}, err
	}
	info0, err := srv.CPU(ctx)
	if err != nil {
		return RedisSample{}, err
	}
	proc0, procErr := srv.ProcCPU()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	r := cell.RunFor(ctx, callers, d)
	runtime.ReadMemStats(&m1)
	proc1, procErr1 := srv.ProcCPU()
	if r.Decisions == 0 {
		return RedisSample{}, fmt.Errorf("%s %s: no decision in %v", cell.Contender.Name, cell.Workload, d)
	}
	s := RedisSample{RunResult: r, Mallocs: m1.Mallocs - m0.Mallocs, Bytes: m1.TotalAlloc - m0.TotalAlloc}
	if procErr == nil && procErr1 == nil {
		s.ProcCPU = proc1 - proc0
	}
	info1, err := srv.CPU(ctx)
	if err != nil {
		return RedisSample{}, err
	}
	s.InfoCPU = info1 - info0
	stats, err := srv.CommandStats(ctx)
	if err != nil {
		return RedisSample{}, err
	}
	for name, st := range stats {
		if !controlCommands[name] {
			s.Commands += st.Calls
		}
	}
	for _, name := range scriptCommands {
		s.ScriptCalls += stats[name].Calls
		s.ScriptUsec += stats[name].Usec
	}
	return s, nil
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
