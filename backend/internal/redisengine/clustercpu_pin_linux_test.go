//go:build linux

package redisengine_test

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// pinCPUs pins every thread of the processes servers to one CPU and every
// thread of this process to another (the first two CPUs this process may
// use), so that the servers and the client never take each other's core.
// It returns the two CPUs and a func that gives this process its former
// affinity back; the servers keep theirs until they exit.
func pinCPUs(servers []int) (serverCPU, clientCPU int, restore func() error, err error) {
	var orig unix.CPUSet
	if err := unix.SchedGetaffinity(0, &orig); err != nil {
		return 0, 0, nil, fmt.Errorf("read this process's CPU affinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(orig)*64 && len(cpus) < 2; c++ {
		if orig.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	if len(cpus) < 2 {
		return 0, 0, nil, errors.New("pinning needs 2 CPUs; this process may use 1: unset LIMITKIT_CPU_PIN")
	}
	serverCPU, clientCPU = cpus[0], cpus[1]
	for _, pid := range servers {
		if err := setAffinity(pid, one(serverCPU)); err != nil {
			return 0, 0, nil, err
		}
	}
	self := os.Getpid()
	if err := setAffinity(self, one(clientCPU)); err != nil {
		return 0, 0, nil, err
	}
	return serverCPU, clientCPU, func() error { return setAffinity(self, orig) }, nil
}

func one(cpu int) unix.CPUSet {
	var s unix.CPUSet
	s.Set(cpu)
	return s
}

// setAffinity sets the CPU affinity of every thread of pid to set and checks
// that each has it: sched_setaffinity moves one thread, and a thread that
// already runs keeps its own mask.
func setAffinity(pid int, set unix.CPUSet) error {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	// Twice, for a thread started while the first pass ran; the check
	// below catches any still left.
	for range 2 {
		tasks, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("list the threads of process %d: %w", pid, err)
		}
		for _, t := range tasks {
			tid, err := strconv.Atoi(t.Name())
			if err != nil {
				continue
			}
			if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("set the CPU affinity of thread %d of process %d: %w", tid, pid, err)
			}
		}
	}
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("list the threads of process %d: %w", pid, err)
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		var got unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &got); err != nil {
			if errors.Is(err, unix.ESRCH) {
				continue
			}
			return fmt.Errorf("read the CPU affinity of thread %d of process %d: %w", tid, pid, err)
		}
		if got != set {
			return fmt.Errorf("thread %d of process %d kept its CPU affinity", tid, pid)
		}
	}
	return nil
}

// contextSwitches returns the voluntary and involuntary context switches of
// the main thread of process pid.
func contextSwitches(pid int) (voluntary, involuntary int64, err error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, 0, fmt.Errorf("read the context switches of process %d: %w", pid, err)
	}
	for line := range strings.Lines(string(data)) {
		k, v, _ := strings.Cut(line, ":")
		n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		switch k {
		case "voluntary_ctxt_switches":
			voluntary = n
		case "nonvoluntary_ctxt_switches":
			involuntary = n
		}
	}
	return voluntary, involuntary, nil
}
