//go:build linux

package redistest

import (
	"bytes"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Children are forked from one goroutine locked to its OS thread for the life
// of the test binary. Pdeathsig fires when the thread that forked the child
// exits, not the process: forking from an ordinary goroutine would let the
// child be killed whenever the Go runtime retires that thread (as it does
// when a goroutine exits while locked to it). A thread that never exits gives
// Pdeathsig its intended meaning: the servers die with the test binary.
var (
	spawnOnce sync.Once
	spawnReqs chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

func spawner() {
	runtime.LockOSThread() // never unlocked, see above
	for r := range spawnReqs {
		r.errc <- r.cmd.Start()
	}
}

// startCmd starts cmd in its own process group, with SIGKILL as its parent
// death signal.
func startCmd(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	spawnOnce.Do(func() {
		spawnReqs = make(chan spawnReq)
		go spawner()
	})
	errc := make(chan error, 1)
	spawnReqs <- spawnReq{cmd: cmd, errc: errc}
	return <-errc
}

// waitStopped waits (briefly) until the process is in the stopped state, so
// that Pause returns only once the server no longer runs.
func waitStopped(pid int) {
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		// The state follows the parenthesised command name: "pid (comm) T ...".
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return
		}
		if st := b[i+2]; st == 'T' || st == 't' {
			return
		}
	}
}
