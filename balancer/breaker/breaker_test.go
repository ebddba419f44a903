package breaker

import (
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"
)

type stopTimer struct{}

func (stopTimer) Stop() bool { return true }

// A breaker trips after ConsecutiveFailures failures in a row, stays open
// for OpenTimeout, admits one trial after it, and a failed trial opens it
// for twice as long, up to MaxOpenTimeout.
func TestTripTrialAndDoubling(t *testing.T) {
	var now int64 = int64(time.Hour)
	var dirty atomic.Bool
	var opened []time.Duration
	cfg := Options{ConsecutiveFailures: 3, OpenTimeout: time.Second, MaxOpenTimeout: 3 * time.Second}.Compiled()
	br := New("u1", &cfg, &dirty, slog.New(slog.NewTextHandler(io.Discard, nil)), func() int64 { return now },
		func(d time.Duration, _ func()) Timer { opened = append(opened, d); return stopTimer{} }, func() {})
	fail := errors.New("502")
	for i := range 3 {
		done, trial, ok := br.Allow(now, false)
		if !ok || trial {
			t.Fatalf("attempt %d refused (trial %v) while closed", i, trial)
		}
		done(fail)
	}
	if br.State() != Open || !dirty.Load() {
		t.Fatalf("after 3 failures: state %d, dirty %v; want open, dirty", br.State(), dirty.Load())
	}
	if _, _, ok := br.Allow(now, false); ok || br.Eligible(now+int64(time.Second)-1) {
		t.Fatal("admitted within the open period")
	}
	for k, want := range []time.Duration{2 * time.Second, 3 * time.Second, 3 * time.Second} {
		now += int64(opened[len(opened)-1])
		done, trial, ok := br.Allow(now, false)
		if !ok || !trial {
			t.Fatalf("trip %d: after the open period: ok %v trial %v; want the trial", k+1, ok, trial)
		}
		if _, _, ok := br.Allow(now, false); ok {
			t.Fatalf("trip %d: a second request admitted beside the trial", k+1)
		}
		done(fail)
		if got := opened[len(opened)-1]; got != want {
			t.Fatalf("trip %d: open for %v, want %v", k+2, got, want)
		}
	}
	now += int64(opened[len(opened)-1])
	done, _, _ := br.Allow(now, false)
	done(nil)
	if br.State() != Closed {
		t.Fatalf("a trial that succeeded left the state %d", br.State())
	}
	// A client that went away is not counted: it neither trips nor resets.
	for range 5 {
		done, _, _ := br.Allow(now, false)
		done(ErrNotCounted)
	}
	if br.State() != Closed || br.Counts().ConsecutiveFailures != 0 {
		t.Fatalf("uncounted outcomes moved the breaker: state %d, %+v", br.State(), br.Counts())
	}
}

// An outcome's verdict: statuses in the failure set and transport errors
// fail, a departed client is not counted, the rest succeed.
func TestOutcomeVerdict(t *testing.T) {
	fail := NewStatusSet([]int{502, 503})
	for _, c := range []struct {
		o    Outcome
		want error
	}{
		{Outcome{Status: 200}, nil},
		{Outcome{Status: 500}, nil},
		{Outcome{Status: 503}, ErrFailed},
		{Outcome{Err: errors.New("reset")}, ErrFailed},
		{Outcome{Status: 200, GRPC: true}, ErrFailed},
		{Outcome{Err: errors.New("reset"), Gone: true}, ErrNotCounted},
	} {
		if got := c.o.Verdict(&fail); got != c.want {
			t.Errorf("%+v: %v, want %v", c.o, got, c.want)
		}
	}
}
