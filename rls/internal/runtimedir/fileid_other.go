//go:build !unix

package runtimedir

import (
	"fmt"
	"io/fs"
)

// openFlags are the open's extra flags; none where O_NONBLOCK is not.
const openFlags = 0

// fileID names the file behind info as well as the platform allows.
func fileID(info fs.FileInfo) string {
	return fmt.Sprintf("%d:%d", info.ModTime().UnixNano(), info.Size())
}

// statKey changes whenever the file's contents may have.
func statKey(info fs.FileInfo) string {
	return fmt.Sprintf("%d:%d", info.ModTime().UnixNano(), info.Size())
}
