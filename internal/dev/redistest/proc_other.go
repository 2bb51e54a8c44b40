//go:build !unix

package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"time"
)

// startCmd starts cmd. Redis does not run natively here; this file only keeps
// the package building.
func startCmd(cmd *exec.Cmd) error { return cmd.Start() }

func signalGroup(pid int, sig signal) error { return signalProcess(pid, sig) }

func signalProcess(pid int, sig signal) error {
	if sig != sigKill {
		return fmt.Errorf("redistest: %v is not supported on %s", sig, runtime.GOOS)
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return err
	}
	return p.Kill()
}

func waitGroupGone(int, time.Duration) {}

func waitStopped(int) {}
