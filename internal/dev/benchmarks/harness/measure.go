package harness

import (
	"context"
	"runtime"
	"time"
)

// Usage is what a measured stretch of load cost the client process and
// the Redis server.
type Usage struct {
	// Mallocs and Bytes are this process's heap allocations
	// (runtime.MemStats deltas), every goroutine included; ProcessCPU is
	// its CPU time (user + system; 0 where there is no getrusage here).
	Mallocs, Bytes uint64
	ProcessCPU     time.Duration
	// The server's share, zero when measured without a server:
	// ScriptCalls and ScriptUsec are its EVALSHA and EVAL calls (and
	// their _RO and FCALL forms) and the µs it spent in them (INFO
	// commandstats deltas); Commands counts every command it ran, those
	// inside scripts included, control commands excluded.
	ScriptCalls, ScriptUsec, Commands int64
	// InfoCPU is the server's CPU time by INFO cpu; ProcCPU by
	// /proc/PID/stat, what the kernel charged it (0 where there is no
	// /proc).
	InfoCPU, ProcCPU time.Duration
}

// controlCommands are the commands the harness and the clients' handshakes
// send, which are not counted as the contenders' work.
var controlCommands = map[string]bool{
	"info": true, "config|resetstat": true, "config": true, "ping": true, "hello": true,
	"client|setinfo": true, "client": true, "script|load": true, "script": true, "select": true,
}

// scriptCommands are the commands that run a script.
var scriptCommands = []string{"evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro"}

// Measure calls run, the measured stretch of a cell (after its warm-up),
// and reports what it cost. With a server, its statistics are reset just
// before (CONFIG RESETSTAT) and read just after, so a warm-up made before
// Measure is not in them; with srv nil only the process is measured.
func Measure(ctx context.Context, srv *Server, run func()) (Usage, error) {
	var u Usage
	var info0, proc0 time.Duration
	var procErr error
	if srv != nil {
		if err := srv.ResetStats(ctx); err != nil {
			return Usage{}, err
		}
		var err error
		if info0, err = srv.CPU(ctx); err != nil {
			return Usage{}, err
		}
		proc0, procErr = srv.ProcCPU()
	}
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	self0 := selfCPU()
	run()
	u.ProcessCPU = selfCPU() - self0
	runtime.ReadMemStats(&m1)
	u.Mallocs, u.Bytes = m1.Mallocs-m0.Mallocs, m1.TotalAlloc-m0.TotalAlloc
	if srv == nil {
		return u, nil
	}
	proc1, procErr1 := srv.ProcCPU()
	if procErr == nil && procErr1 == nil {
		u.ProcCPU = proc1 - proc0
	}
	info1, err := srv.CPU(ctx)
	if err != nil {
		return Usage{}, err
	}
	u.InfoCPU = info1 - info0
	stats, err := srv.CommandStats(ctx)
	if err != nil {
		return Usage{}, err
	}
	for name, st := range stats {
		if !controlCommands[name] {
			u.Commands += st.Calls
		}
	}
	for _, name := range scriptCommands {
		u.ScriptCalls += stats[name].Calls
		u.ScriptUsec += stats[name].Usec
	}
	return u, nil
}
