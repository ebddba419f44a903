package certs

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Files notices when files change on disk, by looking at them (os.Stat
// only, never a read). It serves the certificate pair's Watch, and the
// config file's, so that both follow the same changes alike.
//
// A file counts as changed when the file its path resolves to (through
// any symlinks) is another one, or has another size, modification time,
// mode, owner or inode, or it appeared or vanished: this notices a file
// rewritten in place, one replaced by rename, a Kubernetes ConfigMap or
// Secret volume's update, where config.yaml is a symlink to
// ..data/config.yaml and ..data a symlink swapped to a new directory in
// one rename, and a chmod or chown that makes a file readable again.
//
// A change is reported once it looks complete, so that a file still
// being written (`cat > config.yaml`, an editor that rewrites in place, a
// slow copy) is not read half-way: when the files looked the same on two
// looks in a row, or when every file was last modified at least the
// settle time Changed is given (the look interval) ago. A writer that
// pauses longer than that mid-file can still be read half-way; only a
// rename over the old file is atomic.
//
// The caller takes Stat before it reads the files and Marks what it took
// once it has read them (successfully or not), so that a change made
// while reading is noticed on the next look and a change is acted on once.
type Files struct {
	paths []string

	mu   sync.Mutex
	seen Stamps // as last marked
	last Stamps // as on the previous look, when that differed from seen
}

// NewFiles returns a Files for paths, marked as they are now.
func NewFiles(paths ...string) *Files {
	f := &Files{paths: slices.Clone(paths)}
	f.seen = f.Stat()
	return f
}

// Stat returns the files' state now.
func (f *Files) Stat() Stamps {
	st := make(Stamps, len(f.paths))
	for i, p := range f.paths {
		st[i] = statFile(p)
	}
	return st
}

// Mark records st (from Stat) as the state the files were read in.
func (f *Files) Mark(st Stamps) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seen = st
}

// Changed looks at the files and reports whether they changed since the
// last Mark and the change looks complete: they are as the previous look
// saw them, or each was last modified settle or longer ago (see Files).
// now is their state, to Mark once they are read again.
func (f *Files) Changed(settle time.Duration) (now Stamps, changed bool) {
	now = f.Stat()
	at := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	if slices.Equal(now, f.seen) {
		f.last = nil
		return now, false
	}
	if slices.Equal(now, f.last) || now.modifiedBefore(at.Add(-settle)) {
		return now, true
	}
	f.last = now
	return now, false
}

// Stamps is the state of a Files' files, in order.
type Stamps []stamp

// modifiedBefore reports whether every file is there and was last
// modified no later than t.
func (st Stamps) modifiedBefore(t time.Time) bool {
	for _, s := range st {
		if s.err != "" || s.mtime > t.UnixNano() {
			return false
		}
	}
	return true
}

// stamp is what is compared to notice a file's change.
type stamp struct {
	path     string // the path with every symlink resolved ("" if that failed)
	dev      uint64
	ino      uint64
	uid, gid uint32
	mode     fs.FileMode
	size     int64
	mtime    int64 // Unix nanoseconds
	err      string
}

func statFile(p string) stamp {
	var st stamp
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		st.err = err.Error()
		return st
	}
	st.path = real
	fi, err := os.Stat(real)
	if err != nil {
		st.err = err.Error()
		return st
	}
	st.size, st.mtime, st.mode = fi.Size(), fi.ModTime().UnixNano(), fi.Mode()
	st.dev, st.ino, st.uid, st.gid = fileID(fi)
	return st
}

// Poll calls look every interval (2s when not > 0), or on every receive
// from tick when it is not nil (tests), until ctx is done. The next look
// comes a whole interval after the previous one ended, however long that
// took, so that two looks in a row (see Files.Changed) are never closer.
func Poll(ctx context.Context, interval time.Duration, tick <-chan time.Time, look func()) {
	if interval <= 0 {
		interval = 2 * time.Second
	}
	var t *time.Ticker
	if tick == nil {
		t = time.NewTicker(interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
		}
		look()
		if t != nil {
			t.Reset(interval)
		}
	}
}
