package ringlbtest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// ConfigMapDir lays out a directory as the kubelet mounts a ConfigMap:
// config.yaml is a symlink to ..data/config.yaml, ..data a symlink to a
// timestamped directory holding the data. Update swaps ..data to a new
// directory in one rename, as the kubelet does.
type ConfigMapDir struct {
	t    *testing.T
	dir  string
	gen  int
	Path string // dir/config.yaml, what ringlb is given
}

// NewConfigMapDir lays out the directory with config.yaml holding body.
func NewConfigMapDir(t *testing.T, body string) *ConfigMapDir {
	d := &ConfigMapDir{t: t, dir: t.TempDir()}
	d.Path = filepath.Join(d.dir, "config.yaml")
	d.Update(body)
	if err := os.Symlink(filepath.Join("..data", "config.yaml"), d.Path); err != nil {
		t.Fatal(err)
	}
	return d
}

// Update puts body in a new generation and swaps ..data to it.
func (d *ConfigMapDir) Update(body string) {
	d.t.Helper()
	d.gen++
	ts := fmt.Sprintf("..2026_12_01_09_00_%02d.%d", d.gen, d.gen)
	if err := os.Mkdir(filepath.Join(d.dir, ts), 0o755); err != nil {
		d.t.Fatal(err)
	}
	// Same size and modification time in every generation: only the
	// swap tells them apart.
	f := filepath.Join(d.dir, ts, "config.yaml")
	if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
		d.t.Fatal(err)
	}
	mtime := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	if err := os.Chtimes(f, mtime, mtime); err != nil {
		d.t.Fatal(err)
	}
	tmp := filepath.Join(d.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		d.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(d.dir, "..data")); err != nil {
		d.t.Fatal(err)
	}
}

// ReservePort returns a loopback address whose port is held, until the test
// ends, by a socket that is bound but not listening: dials to it are
// refused and no other socket is given the port, yet a server started on it
// can listen on it, and listen on it again after a crash, while the
// reservation stands. The socket binds without SO_REUSEADDR, so the port
// had nothing else bound, and then sets it: Linux lets a socket with
// SO_REUSEADDR (as Go's listeners have) bind beside sockets that have it
// and do not listen. Elsewhere the test is skipped.
//
// It is for servers that take their address from a flag or a config file
// and do not say which port they got for port 0.
func ReservePort(t testing.TB) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skipf("reserving a port for another server relies on Linux's SO_REUSEADDR rule; this is %s", runtime.GOOS)
	}
	syscall.ForkLock.RLock() // no child started meanwhile inherits it
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err == nil {
		syscall.CloseOnExec(fd)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		t.Fatal(err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("127.0.0.1:%d", sa.(*syscall.SockaddrInet4).Port)
}
