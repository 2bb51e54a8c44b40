//go:build !linux

package redisengine_test

import "errors"

// pinCPUs needs sched_setaffinity, which only Linux has.
func pinCPUs([]int) (serverCPU, clientCPU int, restore func() error, err error) {
	return 0, 0, nil, errors.New("pinning needs Linux (sched_setaffinity): unset LIMITKIT_CPU_PIN")
}

// contextSwitches reads /proc, which only Linux has: it reports none.
func contextSwitches(int) (voluntary, involuntary int64, err error) { return 0, 0, nil }
