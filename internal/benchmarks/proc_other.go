//go:build !linux

package benchmarks

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
