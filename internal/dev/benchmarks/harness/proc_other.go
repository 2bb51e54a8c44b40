//go:build !linux

package harness

import (
	"errors"
	"os/exec"
	"time"
)

// setProcAttr does nothing here: Close kills the server.
func setProcAttr(*exec.Cmd) {}

// procCPU is Linux only; elsewhere the tables show INFO cpu alone.
func procCPU(int) (time.Duration, error) {
	return 0, errors.New("process CPU time needs /proc (Linux)")
}

// selfCPU is Linux only here; elsewhere the process CPU columns read 0.
func selfCPU() time.Duration { return 0 }
