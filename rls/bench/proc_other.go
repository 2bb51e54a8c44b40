//go:build !linux

package rlsbench

import (
	"errors"
	"os/exec"
	"time"
)

func setProcAttr(*exec.Cmd) {}

func procCPU(int) (time.Duration, error) { return 0, errors.New("no /proc on this system") }

func selfCPU() time.Duration { return 0 }
