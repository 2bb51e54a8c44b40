// Package runtimedir reads rate limit configuration files from a runtime
// directory the way the reference server (envoyproxy/ratelimit, through
// lyft/goruntime) does, and watches it for changes.
//
// Two layouts, chosen by RUNTIME_WATCH_ROOT:
//
//   - WatchRoot true (the reference's default): every file under
//     Root/Subdirectory is read, recursively; its name is its path below
//     that directory with "/" replaced by ".", and only names that start
//     with AppDirectory+"." are configuration (config/a.yaml is
//     "config.a.yaml"). A change is a new Root: the directory is replaced by
//     a symlink swap (ln -s new tmp && mv -T tmp Root). Files written in
//     place under the old root are not picked up, as in the reference.
//   - WatchRoot false: every file under Root/Subdirectory/AppDirectory is
//     read, recursively, named by its path below it; any write, creation or
//     removal there is a change.
//
// With IgnoreDotFiles, files and directories whose names start with "." are
// skipped (Kubernetes ConfigMap volumes keep their data in "..data").
//
// As goruntime, Watch waits for file system events (fsnotify: the parent of
// Root for a symlink swap, else the directory and each directory below it);
// where events cannot be had it polls. Either way a file's contents are read
// only when its stat changed, and a change is applied only once two reads
// one interval apart agree (a file still being written is not loaded
// half-written). Only regular files are read (a symlink to one is followed):
// named pipes, devices, sockets and symlinks to directories are skipped and
// reported in Snapshot.Skipped, and a file larger than MaxFileBytes fails the
// read. A file that cannot be read makes the whole read an error: the caller
// keeps its last good configuration.
package runtimedir

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// MaxFileBytes is the most read of one file. A rate limit configuration
// is kilobytes; a larger file fails the read (the last good configuration
// stays) rather than costing memory to parse.
const MaxFileBytes = 16 << 20

// Options says where the configuration files are.
type Options struct {
	Root           string // RUNTIME_ROOT
	Subdirectory   string // RUNTIME_SUBDIRECTORY
	AppDirectory   string // RUNTIME_APPDIRECTORY
	WatchRoot      bool   // RUNTIME_WATCH_ROOT
	IgnoreDotFiles bool   // RUNTIME_IGNOREDOTFILES
	// Log gets Watch's lines: files skipped, watching given up for
	// polling. Nil discards them.
	Log *slog.Logger
}

// File is one configuration file.
type File struct {
	// Name is the file's runtime key, as the reference names it in logs
	// and errors: "config.ratelimit.yaml".
	Name string
	// Path is where it was read.
	Path string
	Data []byte
}

// Skip is a directory entry that is not read: not a regular file.
type Skip struct {
	Name   string
	Reason string
}

// Snapshot is one read of the directory.
type Snapshot struct {
	Files []File
	// Skipped are the entries passed over, in name order.
	Skipped []Skip
	// Err is why the read failed; Files is then empty.
	Err error
	sum [sha256.Size]byte
}

// Same reports whether s and o read the same files with the same contents
// and skipped the same (or failed alike).
func (s Snapshot) Same(o Snapshot) bool { return s.sum == o.sum }

// Dir is the directory walked.
func (o Options) Dir() string {
	if o.WatchRoot {
		return filepath.Join(o.Root, o.Subdirectory)
	}
	return filepath.Join(o.Root, o.Subdirectory, o.AppDirectory)
}

// Read reads the configuration files, in name order, and logs the
// entries it skips.
func (o Options) Read() Snapshot {
	s, _ := o.readCached(nil)
	for _, sk := range s.Skipped {
		o.logger().Warn("runtime file skipped", "file", sk.Name, "reason", sk.Reason)
	}
	return s
}

// cached is a file as last read: the stat it was read under, when, and
// its contents and their hash.
type cached struct {
	key    string
	readAt time.Time
	data   []byte
	sum    [sha256.Size]byte
}

// racy is how close to its read a file's modification time makes the
// cache distrust it: file systems stamp times by the clock tick, so a
// second write of the same size in the tick of the first keeps the stat
// (git's "racily clean" entries).
const racy = 2 * time.Second

// readCached reads the directory, reusing from cache the contents of each
// file whose stat has not changed, and returns the new cache.
func (o Options) readCached(cache map[string]cached) (Snapshot, map[string]cached) {
	next := make(map[string]cached, len(cache))
	files, skipped, err := o.read(cache, next)
	s := Snapshot{Files: files, Skipped: skipped, Err: err}
	h := sha256.New()
	if err != nil {
		s.Files, s.Skipped = nil, nil
		h.Write([]byte("error\x00" + err.Error()))
	}
	for _, f := range s.Files {
		sum := next[f.Path].sum
		fmt.Fprintf(h, "%d:%s", len(f.Name), f.Name)
		h.Write(sum[:])
	}
	for _, sk := range s.Skipped {
		fmt.Fprintf(h, "skip %d:%s%d:%s", len(sk.Name), sk.Name, len(sk.Reason), sk.Reason)
	}
	copy(s.sum[:], h.Sum(nil))
	return s, next
}

func (o Options) read(cache, next map[string]cached) ([]File, []Skip, error) {
	dir, err := o.checkDir()
	if err != nil {
		return nil, nil, err
	}
	r := &dirReader{o: o, dir: dir, cache: cache, next: next}
	// The trailing separator follows dir when it is a symlink (a swapped
	// directory), which WalkDir would otherwise visit as a file.
	if err := filepath.WalkDir(dir+string(filepath.Separator), r.visit); err != nil {
		return nil, nil, err
	}
	slices.SortFunc(r.files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(r.skipped, func(a, b Skip) int { return strings.Compare(a.Name, b.Name) })
	return r.files, r.skipped, nil
}

// checkDir checks the options name a directory, and returns it.
func (o Options) checkDir() (string, error) {
	if o.Root == "" {
		return "", errors.New("RUNTIME_ROOT is empty: set it to the directory holding the configuration")
	}
	if o.WatchRoot && o.Subdirectory == "" {
		return "", errors.New("RUNTIME_SUBDIRECTORY is empty: with RUNTIME_WATCH_ROOT=true the files are read from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY; set it, or set RUNTIME_WATCH_ROOT=false")
	}
	if o.AppDirectory == "" {
		return "", errors.New("RUNTIME_APPDIRECTORY is empty: set it to the configuration folder's name (the reference's default is config)")
	}
	dir := o.Dir()
	info, err := os.Stat(dir)
	if err != nil {
		return "", fmt.Errorf("runtime directory: %w", err)
	}
	if !info.IsDir() {
		return "", fmt.Errorf("runtime directory %s is not a directory", dir)
	}
	return dir, nil
}

// dirReader reads the files of one walk of dir, reusing what cache holds
// of a file unchanged since, and keeping in next what it read.
type dirReader struct {
	o           Options
	dir         string
	cache, next map[string]cached
	files       []File
	skipped     []Skip
}

// visit is the filepath.WalkDirFunc of the walk.
func (r *dirReader) visit(path string, d fs.DirEntry, err error) error {
	if err != nil {
		return fmt.Errorf("runtime directory: %w", err)
	}
	dot := strings.HasPrefix(d.Name(), ".") && filepath.Clean(path) != filepath.Clean(r.dir)
	if d.IsDir() {
		if r.o.IgnoreDotFiles && dot {
			return filepath.SkipDir
		}
		return nil
	}
	if r.o.IgnoreDotFiles && dot {
		return nil
	}
	rel, err := filepath.Rel(r.dir, path)
	if err != nil {
		return fmt.Errorf("runtime directory: %w", err)
	}
	name := strings.ReplaceAll(filepath.ToSlash(rel), "/", ".")
	if r.o.WatchRoot && !strings.HasPrefix(name, r.o.AppDirectory+".") {
		return nil
	}
	return r.file(path, name)
}

// file reads the file at path, named name, unless it is not a regular
// file (skipped) or the cache holds it unchanged.
func (r *dirReader) file(path, name string) error {
	info, err := os.Stat(path) // follows a symlink
	if err != nil {
		return fmt.Errorf("runtime file %s: %w", name, err)
	}
	if why := notRegular(info.Mode()); why != "" {
		r.skipped = append(r.skipped, Skip{Name: name, Reason: why})
		return nil
	}
	key := statKey(info)
	c, ok := r.cache[path]
	if !ok || c.key != key || c.readAt.Sub(info.ModTime()) < racy {
		if testReadHook != nil {
			testReadHook(path)
		}
		data, info, err := readRegular(path)
		if errors.Is(err, errNotRegular) {
			r.skipped = append(r.skipped, Skip{Name: name, Reason: notRegular(info.Mode())})
			return nil
		}
		if err != nil {
			return fmt.Errorf("runtime file %s: %w", name, err)
		}
		c = cached{key: statKey(info), readAt: time.Now(), data: data, sum: sha256.Sum256(data)}
	}
	r.next[path] = c
	r.files = append(r.files, File{Name: name, Path: path, Data: c.data})
	return nil
}

var errNotRegular = errors.New("not a regular file")

// Test hooks: testReadHook sees each file read, testPollHook each check of
// Watch, and testNoNotify makes Watch poll.
var (
	testReadHook func(path string)
	testPollHook func()
	testNoNotify bool
)

// notRegular says why a file of mode m is not read, or "" when it is.
func notRegular(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return ""
	case m.IsDir():
		return "a symlink to a directory, not a regular file"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe, not a regular file"
	case m&fs.ModeSocket != 0:
		return "a socket, not a regular file"
	case m&fs.ModeDevice != 0:
		return "a device, not a regular file"
	}
	return "not a regular file"
}

// readRegular reads the file at path if it is regular and at most
// MaxFileBytes. It opens without blocking and checks the open file, so a
// file swapped for a pipe or a device after its stat is not read.
func readRegular(path string) ([]byte, fs.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|openFlags, 0)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if !info.Mode().IsRegular() {
		return nil, info, errNotRegular
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, nil, err
	}
	if len(data) > MaxFileBytes {
		return nil, nil, fmt.Errorf("larger than %d MiB, the most read of one file; split it", MaxFileBytes>>20)
	}
	return data, info, nil
}

// rootID identifies what Root points at: a symlink swap or a replaced
// directory changes it.
func (o Options) rootID() string {
	var b strings.Builder
	if li, err := os.Lstat(o.Root); err == nil {
		fmt.Fprintf(&b, "%v|%d|", li.Mode(), li.ModTime().UnixNano())
		if target, err := os.Readlink(o.Root); err == nil {
			b.WriteString(target)
		}
		if fi, err := os.Stat(o.Root); err == nil {
			fmt.Fprintf(&b, "|%s", fileID(fi))
		}
	} else {
		b.WriteString("missing")
	}
	return b.String()
}

// Watch waits for changes until ctx ends, and calls apply with each new
// snapshot that differs from the last one applied (start with the
// snapshot the caller loaded first) and has stayed the same for one
// interval (or 250 ms, when shorter, while watching events). It watches
// with fsnotify and polls every interval where it cannot. apply runs on Watch's goroutine; Watch returns when ctx ends.
func (o Options) Watch(ctx context.Context, interval time.Duration, applied Snapshot, apply func(Snapshot)) {
	w := o.watcher(applied)
	l := &watchLoop{o: o, interval: interval}
	l.start()
	defer l.stop()
	l.arm() // a change made before the watch began has no event
	for {
		var events <-chan fsnotify.Event
		var errs <-chan error
		if l.n != nil {
			events, errs = l.n.w.Events, l.n.w.Errors
		}
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			l.event(ev, ok)
			continue
		case err, ok := <-errs:
			l.watchError(err, ok)
			continue
		case <-l.due:
			l.due = nil
		}
		l.resync()
		if testPollHook != nil {
			testPollHook()
		}
		if s, ok := w.poll(); ok {
			apply(s)
		}
		if l.n == nil || w.pending != nil {
			l.arm()
		}
	}
}

// watchLoop is Watch's state: the notifier (nil while polling) and when
// the next check is due. A check is due after an event, and every
// interval while polling or while a change waits for its second read.
// With events the second read comes sooner (settle): a write still going
// on sends more.
type watchLoop struct {
	o        Options
	interval time.Duration
	n        *notifier
	due      <-chan time.Time
}

// start watches for events, or polls when it cannot.
func (l *watchLoop) start() {
	n, err := newNotifier(l.o)
	if testNoNotify && n != nil {
		n.close()
		n, err = nil, errors.New("test: polling")
	}
	if err != nil {
		l.o.logger().Warn("runtime directory: cannot watch for changes; polling instead", "every", l.interval, "err", err)
	}
	l.n = n
}

func (l *watchLoop) stop() {
	if l.n != nil {
		l.n.close()
	}
}

// arm makes a check due, unless one is.
func (l *watchLoop) arm() {
	if l.due == nil {
		wait := l.interval
		if l.n != nil {
			wait = min(l.interval, settle)
		}
		l.due = time.After(wait)
	}
}

// event takes an event (ok false: the notifier closed; poll instead).
func (l *watchLoop) event(ev fsnotify.Event, ok bool) {
	if !ok {
		l.n.close()
		l.n = nil
		l.arm()
		return
	}
	if l.n.relevant(ev) {
		l.arm()
	}
}

// watchError takes an error of the notifier (ok false: it closed; poll
// instead) and checks the directory.
func (l *watchLoop) watchError(err error, ok bool) {
	if !ok {
		l.n.close()
		l.n = nil
	} else {
		l.o.logger().Warn("runtime directory: watch error; checking the directory", "err", err)
	}
	l.arm()
}

// resync watches new directories before a read, so that a file made after
// the read has its event; while polling, it tries to watch again (the
// directory is back).
func (l *watchLoop) resync() {
	switch {
	case l.n != nil:
		if err := l.n.sync(); err != nil {
			l.o.logger().Warn("runtime directory: cannot watch for changes; polling until it can", "every", l.interval, "err", err)
			l.n.close()
			l.n = nil
		}
	case testNoNotify:
		// stay polling
	default:
		if n, err := newNotifier(l.o); err == nil {
			l.n = n
		}
	}
}

// settle is how long after an event Watch reads the directory, and then
// reads it again to confirm, when it is shorter than the interval.
const settle = 250 * time.Millisecond

func (o Options) logger() *slog.Logger {
	if o.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return o.Log
}

// notifier is Watch's fsnotify watcher: on the parent of Root when
// WatchRoot (a symlink swap replaces Root), else on the directory, its
// parent (for the directory itself replaced) and every directory below it.
type notifier struct {
	o Options
	w *fsnotify.Watcher
}

func newNotifier(o Options) (*notifier, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	n := &notifier{o: o, w: w}
	if err := n.sync(); err != nil {
		_ = w.Close()
		return nil, err
	}
	return n, nil
}

func (n *notifier) close() { _ = n.w.Close() }

// sync watches the directories there are now; adding a watched one again
// costs nothing.
func (n *notifier) sync() error {
	if n.o.WatchRoot {
		return n.w.Add(filepath.Dir(filepath.Clean(n.o.Root)))
	}
	dir := n.o.Dir()
	if err := n.w.Add(dir); err != nil {
		return err
	}
	// The parent too: the directory itself may be replaced (a symlink
	// swapped), which no event inside the old one tells.
	_ = n.w.Add(filepath.Dir(filepath.Clean(dir)))
	return filepath.WalkDir(dir+string(filepath.Separator), func(path string, d fs.DirEntry, err error) error {
		if err != nil || filepath.Clean(path) == dir || !d.IsDir() {
			return nil // the next check reports what cannot be read
		}
		if n.o.IgnoreDotFiles && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		return n.w.Add(path)
	})
}

// relevant reports whether ev may change what Read returns.
func (n *notifier) relevant(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	if n.o.WatchRoot {
		return name == filepath.Clean(n.o.Root)
	}
	dir := filepath.Clean(n.o.Dir())
	return filepath.Dir(name) != filepath.Dir(dir) || name == dir
}

// watcher is Watch's state between checks.
type watcher struct {
	o       Options
	root    string
	applied Snapshot
	pending *Snapshot
	cache   map[string]cached
	// skipped is what the last read skipped, logged when it changes.
	skipped []Skip
}

func (o Options) watcher(applied Snapshot) *watcher {
	return &watcher{o: o, root: o.rootID(), applied: applied, skipped: applied.Skipped}
}

// poll reads the directory once and returns the snapshot to apply, if any.
func (w *watcher) poll() (Snapshot, bool) {
	if w.o.WatchRoot {
		// The reference reloads only when Root itself changes.
		id := w.o.rootID()
		if id == w.root && w.pending == nil {
			return Snapshot{}, false
		}
		w.root = id
	}
	s, cache := w.o.readCached(w.cache)
	w.cache = cache
	if s.Err == nil && !slices.Equal(s.Skipped, w.skipped) {
		for _, sk := range s.Skipped {
			if !slices.Contains(w.skipped, sk) {
				w.o.logger().Warn("runtime file skipped", "file", sk.Name, "reason", sk.Reason)
			}
		}
		w.skipped = s.Skipped
	}
	switch {
	case s.Same(w.applied):
		w.pending = nil
	case w.pending != nil && s.Same(*w.pending):
		w.applied, w.pending = s, nil
		return s, true
	default:
		w.pending = &s
	}
	return Snapshot{}, false
}
