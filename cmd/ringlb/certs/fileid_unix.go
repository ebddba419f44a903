//go:build unix

package certs

import (
	"io/fs"
	"syscall"
)

// fileID returns the device and inode of a file, which change when a file
// is replaced (by rename, or a Secret volume's directory swap) even if its
// size and modification time do not, and its owner, whose change (like
// one of its mode) can make a file that could not be read readable.
func fileID(fi fs.FileInfo) (dev, ino uint64, uid, gid uint32) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Dev), uint64(st.Ino), st.Uid, st.Gid
	}
	return 0, 0, 0, 0
}
