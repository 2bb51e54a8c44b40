package runtimedir

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func names(s Snapshot) []string {
	var out []string
	for _, f := range s.Files {
		out = append(out, f.Name)
	}
	return out
}

// TestReadWatchRootLayout: the reference (goruntime with RUNTIME_WATCH_ROOT
// true) reads ROOT/SUBDIR recursively, names files by their path with "."
// and keeps those under the app directory.
func TestReadWatchRootLayout(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "ratelimit", "config", "a.yaml"), "a")
	write(t, filepath.Join(root, "ratelimit", "config", "nested", "b.yml"), "b")
	write(t, filepath.Join(root, "ratelimit", "config", ".hidden.yaml"), "h")
	write(t, filepath.Join(root, "ratelimit", "other.yaml"), "not config")
	write(t, filepath.Join(root, "ratelimit", "configx", "c.yaml"), "not config either")
	o := Options{Root: root, Subdirectory: "ratelimit", AppDirectory: "config", WatchRoot: true}
	s := o.Read()
	if s.Err != nil {
		t.Fatal(s.Err)
	}
	if got, want := names(s), []string{"config..hidden.yaml", "config.a.yaml", "config.nested.b.yml"}; !slices.Equal(got, want) {
		t.Fatalf("names %v, want %v", got, want)
	}
	o.IgnoreDotFiles = true
	if got, want := names(o.Read()), []string{"config.a.yaml", "config.nested.b.yml"}; !slices.Equal(got, want) {
		t.Fatalf("ignoring dot files: names %v, want %v", got, want)
	}
}

// TestReadDirectoryLayout: with RUNTIME_WATCH_ROOT false the files are
// those under ROOT/SUBDIR/APPDIR, named below it; a ConfigMap's "..data"
// is skipped with IgnoreDotFiles.
func TestReadDirectoryLayout(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "rl", "config", "a.yaml"), "a")
	write(t, filepath.Join(root, "rl", "config", "..data", "a.yaml"), "a")
	o := Options{Root: root, Subdirectory: "rl", AppDirectory: "config", IgnoreDotFiles: true}
	if got, want := names(o.Read()), []string{"a.yaml"}; !slices.Equal(got, want) {
		t.Fatalf("names %v, want %v", got, want)
	}
	o.IgnoreDotFiles = false
	if got, want := names(o.Read()), []string{"..data.a.yaml", "a.yaml"}; !slices.Equal(got, want) {
		t.Fatalf("names %v, want %v", got, want)
	}
}

func TestReadErrors(t *testing.T) {
	root := t.TempDir()
	cases := []struct {
		o    Options
		want string
	}{
		{Options{Root: root, AppDirectory: "config", WatchRoot: true}, "RUNTIME_SUBDIRECTORY is empty"},
		{Options{Root: root, Subdirectory: "x"}, "RUNTIME_APPDIRECTORY is empty"},
		{Options{Root: filepath.Join(root, "missing"), Subdirectory: "x", AppDirectory: "config"}, "no such file"},
		{Options{}, "RUNTIME_ROOT is empty"},
	}
	for _, c := range cases {
		s := c.o.Read()
		if s.Err == nil || !strings.Contains(s.Err.Error(), c.want) {
			t.Errorf("%+v: error %v, want it to say %q", c.o, s.Err, c.want)
		}
	}
	// An unreadable file fails the whole read, so the last good
	// configuration is kept rather than loaded without that file.
	write(t, filepath.Join(root, "d", "config", "ok.yaml"), "a")
	if err := os.Symlink(filepath.Join(root, "nowhere"), filepath.Join(root, "d", "config", "dangling.yaml")); err != nil {
		t.Fatal(err)
	}
	s := Options{Root: root, Subdirectory: "d", AppDirectory: "config"}.Read()
	if s.Err == nil || len(s.Files) != 0 {
		t.Fatalf("a dangling file: %v, %d files; want an error and none", s.Err, len(s.Files))
	}
}

// TestPollDirectory: any write, creation or removal is applied, once two
// reads agree.
func TestPollDirectory(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "config", "a.yaml")
	write(t, path, "one")
	o := Options{Root: root, AppDirectory: "config"}
	w := o.watcher(o.Read())
	if _, ok := w.poll(); ok {
		t.Fatal("applied with nothing changed")
	}
	write(t, path, "two")
	if _, ok := w.poll(); ok {
		t.Fatal("applied a change seen once: it may be half-written")
	}
	write(t, path, "three") // still changing
	if _, ok := w.poll(); ok {
		t.Fatal("applied a change that did not hold for one interval")
	}
	s, ok := w.poll()
	if !ok || string(s.Files[0].Data) != "three" {
		t.Fatalf("stable change: applied %v %v, want three", ok, s.Files)
	}
	if _, ok := w.poll(); ok {
		t.Fatal("applied the same snapshot twice")
	}
	write(t, filepath.Join(root, "config", "b.yaml"), "b")
	w.poll()
	if s, ok := w.poll(); !ok || len(s.Files) != 2 {
		t.Fatalf("a new file: applied %v with %d files, want 2", ok, len(s.Files))
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	w.poll()
	if s, ok := w.poll(); !ok || !slices.Equal(names(s), []string{"b.yaml"}) {
		t.Fatalf("a removal: applied %v with %v, want b.yaml alone", ok, names(s))
	}
}

// TestPollSymlinkSwap: with WatchRoot a write in place is not applied (as
// in the reference); swapping the root symlink is.
func TestPollSymlinkSwap(t *testing.T) {
	base := t.TempDir()
	write(t, filepath.Join(base, "v1", "rl", "config", "a.yaml"), "one")
	write(t, filepath.Join(base, "v2", "rl", "config", "a.yaml"), "two")
	current := filepath.Join(base, "current")
	if err := os.Symlink(filepath.Join(base, "v1"), current); err != nil {
		t.Fatal(err)
	}
	o := Options{Root: current, Subdirectory: "rl", AppDirectory: "config", WatchRoot: true}
	w := o.watcher(o.Read())
	write(t, filepath.Join(base, "v1", "rl", "config", "a.yaml"), "in place")
	for range 3 {
		if _, ok := w.poll(); ok {
			t.Fatal("applied a write in place under the watched root")
		}
	}
	tmp := filepath.Join(base, "tmp")
	if err := os.Symlink(filepath.Join(base, "v2"), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, current); err != nil {
		t.Fatal(err)
	}
	w.poll()
	s, ok := w.poll()
	if !ok || string(s.Files[0].Data) != "two" {
		t.Fatalf("after the swap: applied %v %v, want two", ok, s.Files)
	}
}

// TestWatch runs the polling loop itself.
func TestWatch(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "config", "a.yaml")
	write(t, path, "one")
	o := Options{Root: root, AppDirectory: "config"}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Snapshot, 1)
	done := make(chan struct{})
	first := o.Read()
	go func() {
		defer close(done)
		o.Watch(ctx, 5*time.Millisecond, first, func(s Snapshot) { got <- s })
	}()
	write(t, path, "two")
	select {
	case s := <-got:
		if string(s.Files[0].Data) != "two" {
			t.Fatalf("applied %q, want two", s.Files[0].Data)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no change applied within 10s")
	}
	cancel()
	<-done
}
