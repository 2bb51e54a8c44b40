//go:build unix

package runtimedir

import (
	"fmt"
	"io/fs"
	"syscall"
)

// openFlags open a file without waiting: a named pipe that appears
// between the stat and the open must not block the reader.
const openFlags = syscall.O_NONBLOCK

// fileID names the file behind info: device and inode.
func fileID(info fs.FileInfo) string {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	}
	return fmt.Sprintf("%d:%d", info.ModTime().UnixNano(), info.Size())
}

// statKey changes whenever the file's contents may have: a new inode, a
// new size, a new modification time (see racy in runtimedir.go).
func statKey(info fs.FileInfo) string {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d:%d:%d", st.Dev, st.Ino, info.Size(), info.ModTime().UnixNano())
	}
	return fmt.Sprintf("%d:%d", info.ModTime().UnixNano(), info.Size())
}
