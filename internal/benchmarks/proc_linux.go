package benchmarks

import (
	"os/exec"
	"syscall"
)

// setProcAttr makes the server die with this process.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
