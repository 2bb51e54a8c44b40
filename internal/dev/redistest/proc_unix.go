//go:build unix

package redistest

import (
	"syscall"
	"time"
)

var unixSignals = map[signal]syscall.Signal{
	sigKill: syscall.SIGKILL,
	sigTerm: syscall.SIGTERM,
	sigStop: syscall.SIGSTOP,
	sigCont: syscall.SIGCONT,
}

// signalGroup sends sig to the process group led by pid (startCmd makes each
// server a group leader), reaching any child the server forked.
func signalGroup(pid int, sig signal) error {
	return syscall.Kill(-pid, unixSignals[sig])
}

// signalProcess sends sig to pid alone.
func signalProcess(pid int, sig signal) error {
	return syscall.Kill(pid, unixSignals[sig])
}

// waitGroupGone waits, at most d, until no process of the group led by pid is
// left (a server's forked child can outlive it by a moment).
func waitGroupGone(pid int, d time.Duration) {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if syscall.Kill(-pid, 0) != nil {
			return
		}
	}
}
