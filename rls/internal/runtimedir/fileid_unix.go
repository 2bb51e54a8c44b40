//go:build unix

package runtimedir

import (
	"fmt"
	"io/fs"
	"syscall"
)

// fileID names the file behind info: device and inode.
func fileID(info fs.FileInfo) string {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
	}
	return fmt.Sprintf("%d:%d", info.ModTime().UnixNano(), info.Size())
}
