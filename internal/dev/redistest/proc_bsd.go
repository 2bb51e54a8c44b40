//go:build unix && !linux

package redistest

import (
	"os/exec"
	"syscall"
)

// startCmd starts cmd in its own process group. Outside Linux there is no
// parent death signal: only t.Cleanup stops the servers.
func startCmd(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd.Start()
}

// waitStopped is a no-op where /proc is not available.
func waitStopped(int) {}
