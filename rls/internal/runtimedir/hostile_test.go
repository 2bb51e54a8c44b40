package runtimedir

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// readWithin runs o.Read, failing the test when it has not returned
// within a minute (a blocking open of a named pipe never does).
func readWithin(t *testing.T, o Options) Snapshot {
	t.Helper()
	done := make(chan Snapshot, 1)
	go func() { done <- o.Read() }()
	select {
	case s := <-done:
		return s
	case <-time.After(time.Minute):
		t.Fatal("Read blocked for a minute")
		return Snapshot{}
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestReadSkipsNonRegularFiles: a named pipe, a symlink to /dev/zero and a
// symlink to a directory are skipped with a reason and a log line; the
// regular files are read.
func TestReadSkipsNonRegularFiles(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "config")
	write(t, filepath.Join(dir, "a.yaml"), "a")
	if err := syscall.Mkfifo(filepath.Join(dir, "x.yaml"), 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "zero.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(root, filepath.Join(dir, "loop")); err != nil {
		t.Fatal(err)
	}
	var logs lockedBuffer
	o := Options{Root: root, AppDirectory: "config", Log: slog.New(slog.NewTextHandler(&logs, nil))}
	s := readWithin(t, o)
	if s.Err != nil {
		t.Fatal(s.Err)
	}
	if got := names(s); !slices.Equal(got, []string{"a.yaml"}) {
		t.Fatalf("read %v, want a.yaml alone", got)
	}
	want := []Skip{
		{"loop", "a symlink to a directory, not a regular file"},
		{"x.yaml", "a named pipe, not a regular file"},
		{"zero.yaml", "a device, not a regular file"},
	}
	if !slices.Equal(s.Skipped, want) {
		t.Fatalf("skipped %v, want %v", s.Skipped, want)
	}
	for _, sk := range want {
		if !strings.Contains(logs.String(), "file="+sk.Name) {
			t.Errorf("no log line for %s:\n%s", sk.Name, logs.String())
		}
	}
}

// TestReadRefusesHugeFile: a file past MaxFileBytes fails the read, which
// keeps the last good configuration, and is not read whole.
func TestReadRefusesHugeFile(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "config", "big.yaml")
	write(t, path, "")
	if err := os.Truncate(path, 1<<40); err != nil { // sparse: a terabyte
		t.Skipf("no sparse files here: %v", err)
	}
	s := readWithin(t, Options{Root: root, AppDirectory: "config"})
	if s.Err == nil || !strings.Contains(s.Err.Error(), "big.yaml: larger than 16 MiB") {
		t.Fatalf("a 1 TB file: %v", s.Err)
	}
	if err := os.Truncate(path, MaxFileBytes); err != nil {
		t.Fatal(err)
	}
	if s := readWithin(t, Options{Root: root, AppDirectory: "config"}); s.Err != nil || len(s.Files[0].Data) != MaxFileBytes {
		t.Fatalf("a file of MaxFileBytes: %v", s.Err)
	}
}

// setOld sets a file's times an hour back, out of the racy window, as a
// file written long ago.
func setOld(t *testing.T, path string, ago time.Duration) {
	t.Helper()
	at := time.Now().Add(-ago)
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

// TestPollReadsOnlyChangedFiles: a check stats every file but reads only
// those whose stat changed; the control shows a changed stat is read.
func TestPollReadsOnlyChangedFiles(t *testing.T) {
	root := t.TempDir()
	var paths []string
	for _, n := range []string{"a.yaml", "b.yaml", "c.yaml"} {
		p := filepath.Join(root, "config", n)
		write(t, p, n)
		setOld(t, p, time.Hour)
		paths = append(paths, p)
	}
	var reads []string
	testReadHook = func(p string) { reads = append(reads, p) }
	t.Cleanup(func() { testReadHook = nil })
	o := Options{Root: root, AppDirectory: "config"}
	w := o.watcher(o.Read())
	reads = nil
	w.poll() // fills the cache
	reads = nil
	for range 3 {
		if _, ok := w.poll(); ok {
			t.Fatal("applied with nothing changed")
		}
	}
	if len(reads) != 0 {
		t.Fatalf("unchanged files read again: %v", reads)
	}
	// Same size, new time: read (the control).
	write(t, paths[1], "B.yaml")
	setOld(t, paths[1], 30*time.Minute)
	w.poll()
	s, ok := w.poll()
	if !slices.Equal(reads, []string{paths[1]}) {
		t.Fatalf("after one change read %v, want %s alone", reads, paths[1])
	}
	if !ok || string(s.Files[1].Data) != "B.yaml" {
		t.Fatalf("the change: applied %v %v", ok, s.Files)
	}
}

// watchFor runs Watch until the test ends and returns the snapshots it
// applies.
func watchFor(t *testing.T, o Options, interval time.Duration) <-chan Snapshot {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Snapshot, 16)
	done := make(chan struct{})
	first := o.Read()
	go func() {
		defer close(done)
		o.Watch(ctx, interval, first, func(s Snapshot) { got <- s })
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return got
}

func waitApplied(t *testing.T, got <-chan Snapshot, what string, ok func(Snapshot) bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		select {
		case s := <-got:
			if ok(s) {
				return
			}
		case <-deadline:
			t.Fatalf("not applied within 20s: %s", what)
		}
	}
}

// TestWatchWaitsForEvents: with events, Watch does not check the
// directory while nothing happens, and applies a change, in a new
// subdirectory too; the control (polling) shows idle checks are counted.
func TestWatchWaitsForEvents(t *testing.T) {
	for _, polling := range []bool{false, true} {
		name := "events"
		if polling {
			name = "polling"
		}
		t.Run(name, func(t *testing.T) {
			testNoNotify = polling
			var checks atomic.Int64
			testPollHook = func() { checks.Add(1) }
			t.Cleanup(func() { testNoNotify, testPollHook = false, nil })
			root := t.TempDir()
			write(t, filepath.Join(root, "config", "a.yaml"), "one")
			got := watchFor(t, Options{Root: root, AppDirectory: "config"}, 2*time.Millisecond)
			write(t, filepath.Join(root, "config", "a.yaml"), "two")
			waitApplied(t, got, "a write", func(s Snapshot) bool { return string(s.Files[0].Data) == "two" })
			if err := os.MkdirAll(filepath.Join(root, "config", "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			// Once a check has seen the new directory, a file in it is an
			// event there.
			seen := checks.Load()
			for deadline := time.Now().Add(20 * time.Second); checks.Load() <= seen; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no check after a new directory")
				}
			}
			write(t, filepath.Join(root, "config", "sub", "b.yaml"), "b")
			waitApplied(t, got, "a file in a new directory", func(s Snapshot) bool { return len(s.Files) == 2 })
			// Idle: a quarter second is a hundred polling intervals.
			before := checks.Load()
			time.Sleep(250 * time.Millisecond)
			idle := checks.Load() - before
			if polling && idle < 10 {
				t.Fatalf("polling: %d checks in 250ms idle; the count misses them", idle)
			}
			if !polling && idle > 2 {
				t.Fatalf("watching: %d checks in 250ms with nothing changing", idle)
			}
		})
	}
}

// TestWatchSkipsPipeAndAppliesLater: a named pipe appearing is logged and
// skipped, and a change after it is still applied.
func TestWatchSkipsPipeAndAppliesLater(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "config", "a.yaml"), "one")
	var logs lockedBuffer
	o := Options{Root: root, AppDirectory: "config", Log: slog.New(slog.NewTextHandler(&logs, nil))}
	got := watchFor(t, o, 2*time.Millisecond)
	if err := syscall.Mkfifo(filepath.Join(root, "config", "x.yaml"), 0o644); err != nil {
		t.Skipf("no named pipes here: %v", err)
	}
	waitApplied(t, got, "the pipe seen", func(s Snapshot) bool { return len(s.Skipped) == 1 })
	write(t, filepath.Join(root, "config", "a.yaml"), "two")
	waitApplied(t, got, "a change after the pipe", func(s Snapshot) bool { return string(s.Files[0].Data) == "two" })
	if n := strings.Count(logs.String(), "file=x.yaml"); n != 1 {
		t.Fatalf("%d log lines for the pipe, want 1:\n%s", n, logs.String())
	}
}

// TestWatchDirectorySwapped: with WatchRoot false, the directory itself
// replaced by a symlink swap is seen (inotify watches what a path pointed
// at when it was added).
func TestWatchDirectorySwapped(t *testing.T) {
	base := t.TempDir()
	write(t, filepath.Join(base, "v1", "a.yaml"), "one")
	write(t, filepath.Join(base, "v2", "a.yaml"), "two")
	root := filepath.Join(base, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(root, "config")
	if err := os.Symlink(filepath.Join(base, "v1"), config); err != nil {
		t.Fatal(err)
	}
	got := watchFor(t, Options{Root: root, AppDirectory: "config"}, time.Hour) // no polling to fall back on
	tmp := filepath.Join(root, "tmp")
	if err := os.Symlink(filepath.Join(base, "v2"), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, config); err != nil {
		t.Fatal(err)
	}
	waitApplied(t, got, "the swap", func(s Snapshot) bool { return string(s.Files[0].Data) == "two" })
	write(t, filepath.Join(base, "v2", "a.yaml"), "three")
	waitApplied(t, got, "a write in the new directory", func(s Snapshot) bool { return string(s.Files[0].Data) == "three" })
}

func writeB(b *testing.B, path, data string) {
	b.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		b.Fatal(err)
	}
}
