//go:build !linux

package benchmarks

import "os/exec"

// setProcAttr does nothing here: Close kills the server.
func setProcAttr(*exec.Cmd) {}
