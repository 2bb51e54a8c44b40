//go:build !unix

package runtimedir

import (
	"fmt"
	"io/fs"
)

// fileID names the file behind info as well as the platform allows.
func fileID(info fs.FileInfo) string {
	return fmt.Sprintf("%d:%d", info.ModTime().UnixNano(), info.Size())
}
