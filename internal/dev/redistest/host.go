package redistest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// freeClusterPort returns a free port p whose cluster bus port p+10000 is
// free too (so p <= 55535).
func freeClusterPort() (int, error) {
	var held []net.Listener // rejected ports, held so they are not offered again
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for range 100 {
		l, err := net.Listen("tcp", net.JoinHostPort(loopback, "0"))
		if err != nil {
			return 0, err
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if p > maxClusterPort {
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort(loopback, strconv.Itoa(p+busPortOffset)))
		if err != nil {
			continue
		}
		_ = bus.Close()
		return p, nil
	}
	return 0, errors.New("no free port p with p+10000 free after 100 tries")
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// containsSince reports whether the file contains text after offset off.
func containsSince(path string, off int64, text string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, off, 1<<30))
	return err == nil && bytes.Contains(b, []byte(text))
}

// tailLines returns the last n lines of a file (read from its last 64 KiB).
func tailLines(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	size := fileSize(path)
	off := max(0, size-logTailBytes)
	b, err := io.ReadAll(io.NewSectionReader(f, off, size-off))
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // a partial first line
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// version is a Redis release, major.minor.
type version struct{ major, minor int }

func (v version) atLeast(major, minor int) bool {
	return v.major > major || (v.major == major && v.minor >= minor)
}

var (
	versionMu    sync.Mutex
	versionCache = map[string]version{}
	versionRE    = regexp.MustCompile(`v=(\d+)\.(\d+)`)
)

// serverVersion returns the version of a redis-server binary, asking it once
// per binary, so that settings newer than the binary are left out. An
// unknown version is 0.0: only settings every release has are used.
func serverVersion(bin string) version {
	versionMu.Lock()
	defer versionMu.Unlock()
	if v, ok := versionCache[bin]; ok {
		return v
	}
	var v version
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if m := versionRE.FindSubmatch(out); err == nil && m != nil {
		v.major, _ = strconv.Atoi(string(m[1]))
		v.minor, _ = strconv.Atoi(string(m[2]))
	}
	versionCache[bin] = v
	return v
}
