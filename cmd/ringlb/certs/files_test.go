package certs_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/certs"
)

// Files.Changed reports a change once it looks complete: when two looks
// in a row saw the same files, or when the files were last modified a
// settle time ago, and a mode change counts as a change.
func TestFilesChangedWaitsForAWholeFile(t *testing.T) {
	const settle = time.Hour // only the second rule can fire for fresh writes
	p := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(p, []byte("a: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	f := certs.NewFiles(p)
	look := func(want bool, what string) {
		t.Helper()
		st, changed := f.Changed(settle)
		if changed != want {
			t.Fatalf("%s: changed %v, want %v", what, changed, want)
		}
		if changed {
			f.Mark(st)
		}
	}
	look(false, "no change")

	// A slow writer: the first half, a look, the second half.
	os.WriteFile(p, []byte("a: 1\n"), 0o644)
	w, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	w.WriteString("b: 2\n")
	look(false, "the first half, seen once")
	w.WriteString("c: 3\n")
	w.Close()
	look(false, "the whole file, seen once")
	look(true, "the whole file, seen twice")
	look(false, "after it was marked")

	// A change modified long ago is taken at once (a Kubernetes volume
	// swap keeps old times; so does cp -p).
	os.WriteFile(p, []byte("a: 2\n"), 0o644)
	old := time.Now().Add(-2 * settle)
	os.Chtimes(p, old, old)
	look(true, "a change modified before the settle time")

	// The mode alone: a file that could not be read becomes readable.
	os.Chmod(p, 0)
	look(true, "chmod 000 (modified long ago)")
	os.Chmod(p, 0o644)
	look(true, "chmod 644")

	// Back to the marked state before a second look: no change at all.
	os.WriteFile(p, []byte("a: 3\n"), 0o644)
	look(false, "a change seen once")
	os.WriteFile(p, []byte("a: 2\n"), 0o644)
	os.Chtimes(p, old, old)
	look(false, "the marked file again")
}
