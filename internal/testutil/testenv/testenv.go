// Package testenv holds what tests need from their environment.
package testenv

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SkipExternal is called when a tool an external check needs (nginx,
// Prometheus, Chromium, curl, ...) is missing. It skips the test, or fails
// it when the environment variable CI is true (as strconv.ParseBool reads
// it: CI=true or CI=1; CI=false or unset skips). Each skip is also
// appended, as one tab-separated line "tool, reason, test", to the file
// RINGLB_SKIPPED names, if set: .ci/run reads it to end the test run with
// one line saying which external checks were skipped and why.
func SkipExternal(t testing.TB, tool, reason string) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("%s: %s (CI=%s: external checks must run; install it)", tool, reason, os.Getenv("CI"))
	}
	if path := os.Getenv("RINGLB_SKIPPED"); path != "" {
		if f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644); err == nil {
			fmt.Fprintf(f, "%s\t%s\t%s\n", tool, reason, t.Name())
			f.Close()
		}
	}
	t.Skipf("external check skipped: %s: %s", tool, reason)
}

// Eventually calls cond until it returns nil, and fails the test with
// cond's last error if that has not happened within timeout. Call it from
// the test's goroutine.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	var last error
	if !Poll(timeout, func() bool { last = cond(); return last == nil }) {
		t.Fatalf("after %v: %v", timeout, last)
	}
}

// Poll calls cond until it returns true or timeout has passed, and reports
// whether it did. It polls every 5 ms at first, backing off to 100 ms, so
// quick conditions are seen quickly and slow ones cost little.
func Poll(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(wait)
	}
}

// Buffer is a bytes.Buffer safe for concurrent writers (a logger, a child
// process's output copier) and a test reading it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ReportCPU adds the metric cpu-ns/op: the process's CPU time (user and
// system, all threads, the collector's included) per iteration. On a
// machine other work shares, ns/op counts the time spent waiting for a
// CPU too; cpu-ns/op does not. Call the function it returns when the
// loop is done.
func ReportCPU(b *testing.B) func() {
	start := CPUTime()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64(CPUTime()-start)/float64(b.N), "cpu-ns/op")
		}
	}
}

func CPUTime() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
