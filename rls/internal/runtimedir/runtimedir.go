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
// Unlike goruntime the directory is polled rather than watched with
// inotify, so that it works on any file system, and a change is applied only
// once two reads one interval apart agree (a file still being written is not
// loaded half-written). A file that cannot be read makes the whole read an
// error: the caller keeps its last good configuration.
package runtimedir

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Options says where the configuration files are.
type Options struct {
	Root           string // RUNTIME_ROOT
	Subdirectory   string // RUNTIME_SUBDIRECTORY
	AppDirectory   string // RUNTIME_APPDIRECTORY
	WatchRoot      bool   // RUNTIME_WATCH_ROOT
	IgnoreDotFiles bool   // RUNTIME_IGNOREDOTFILES
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

// Snapshot is one read of the directory.
type Snapshot struct {
	Files []File
	// Err is why the read failed; Files is then empty.
	Err error
	sum [sha256.Size]byte
}

// Same reports whether s and o read the same files with the same contents
// (or failed alike).
func (s Snapshot) Same(o Snapshot) bool { return s.sum == o.sum }

// Dir is the directory walked.
func (o Options) Dir() string {
	if o.WatchRoot {
		return filepath.Join(o.Root, o.Subdirectory)
	}
	return filepath.Join(o.Root, o.Subdirectory, o.AppDirectory)
}

// Read reads the configuration files, in name order.
func (o Options) Read() Snapshot {
	files, err := o.read()
	s := Snapshot{Files: files, Err: err}
	h := sha256.New()
	if err != nil {
		s.Files = nil
		h.Write([]byte("error\x00" + err.Error()))
	}
	for _, f := range s.Files {
		fmt.Fprintf(h, "%d:%s%d:", len(f.Name), f.Name, len(f.Data))
		h.Write(f.Data)
	}
	copy(s.sum[:], h.Sum(nil))
	return s
}

func (o Options) read() ([]File, error) {
	if o.Root == "" {
		return nil, errors.New("RUNTIME_ROOT is empty: set it to the directory holding the configuration")
	}
	if o.WatchRoot && o.Subdirectory == "" {
		return nil, errors.New("RUNTIME_SUBDIRECTORY is empty: with RUNTIME_WATCH_ROOT=true the files are read from RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY; set it, or set RUNTIME_WATCH_ROOT=false")
	}
	if o.AppDirectory == "" {
		return nil, errors.New("RUNTIME_APPDIRECTORY is empty: set it to the configuration folder's name (the reference's default is config)")
	}
	dir := o.Dir()
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("runtime directory: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("runtime directory %s is not a directory", dir)
	}
	var files []File
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("runtime directory: %w", err)
		}
		dot := strings.HasPrefix(d.Name(), ".") && path != dir
		if d.IsDir() {
			if o.IgnoreDotFiles && dot {
				return filepath.SkipDir
			}
			return nil
		}
		if o.IgnoreDotFiles && dot {
			return nil
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return fmt.Errorf("runtime directory: %w", err)
		}
		name := strings.ReplaceAll(filepath.ToSlash(rel), "/", ".")
		if o.WatchRoot && !strings.HasPrefix(name, o.AppDirectory+".") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return fmt.Errorf("runtime file %s: %w", name, err)
		}
		files = append(files, File{Name: name, Path: path, Data: data})
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Name, b.Name) })
	return files, nil
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

// Watch polls the directory every interval until ctx ends, and calls apply
// with each new snapshot that differs from the last one applied (start with
// the snapshot the caller loaded first) and has stayed the same for one
// interval. apply runs on Watch's goroutine; Watch returns when ctx ends.
func (o Options) Watch(ctx context.Context, interval time.Duration, applied Snapshot, apply func(Snapshot)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	w := o.watcher(applied)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if s, ok := w.poll(); ok {
			apply(s)
		}
	}
}

// watcher is Watch's state between polls.
type watcher struct {
	o       Options
	root    string
	applied Snapshot
	pending *Snapshot
}

func (o Options) watcher(applied Snapshot) *watcher {
	return &watcher{o: o, root: o.rootID(), applied: applied}
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
	s := w.o.Read()
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
