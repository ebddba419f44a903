package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/dnstest"

	"github.com/miekg/dns"
)

// clock is a settable time for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// harness is a Discoverer on a test DNS server, recording its updates and
// log lines.
type harness struct {
	z       *dnstest.Server
	d       *Discoverer
	clock   *clock
	updates chan Update
	logs    *lockedBuffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Take returns what was written since the last Take.
func (l *lockedBuffer) Take() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	l.b.Reset()
	return s
}

func newHarness(t *testing.T, confirm int, sources ...Source) *harness {
	t.Helper()
	h := &harness{z: dnstest.New(t), clock: &clock{t: t0}, updates: make(chan Update, 16), logs: &lockedBuffer{}}
	d, err := New(h.options(confirm, sources...))
	if err != nil {
		t.Fatal(err)
	}
	h.d = d
	return h
}

func (h *harness) options(confirm int, sources ...Source) Options {
	return Options{
		Resolver: h.z.Addr, Interval: time.Hour, Timeout: 300 * time.Millisecond,
		RemoveAfter: 5 * time.Minute, Confirm: confirm, Sources: sources,
		OnChange: func(u Update) { h.updates <- u },
		Logger:   slog.New(slog.NewTextHandler(h.logs, nil)),
		Now:      h.clock.Now,
	}
}

// poll polls once and returns the update it made, or nil.
func (h *harness) poll(t *testing.T) *Update {
	t.Helper()
	changed := h.d.Poll(context.Background())
	select {
	case u := <-h.updates:
		if !changed {
			t.Fatalf("OnChange called but Poll reports no change")
		}
		return &u
	default:
		if changed {
			t.Fatalf("Poll reports a change but OnChange was not called")
		}
		return nil
	}
}

func TestDiscovererSRV(t *testing.T) {
	h := newHarness(t, 3, srvSource("_http._tcp.app.test"))
	z := h.z
	z.SetSRV("_http._tcp.app.test", "App-0.App.Test.:8080", "app-1.app.test.:8080", "app-2.app.test.:8080", "app-3.app.test.:8080")
	for i, a := range []string{"127.0.0.1", "127.0.0.3", "127.0.0.4", "127.0.0.5"} {
		z.SetAddrs("app-"+string(rune('0'+i))+".app.test", a)
	}

	// First answer: members named target:port, initial.
	u := h.poll(t)
	if u == nil {
		t.Fatal("first answer: no update")
	}
	want := "app-0.app.test:8080=127.0.0.1:8080+initial app-1.app.test:8080=127.0.0.3:8080+initial " +
		"app-2.app.test:8080=127.0.0.4:8080+initial app-3.app.test:8080=127.0.0.5:8080+initial"
	if got := showMembers(u.Members); got != want {
		t.Fatalf("members\ngot  %s\nwant %s", got, want)
	}
	if logs := h.logs.Take(); strings.Count(logs, "\n") != 4 || strings.Count(logs, "change=added") != 4 {
		t.Errorf("first answer logged:\n%s", logs)
	}

	// The same answer again: no update, no log line.
	if u := h.poll(t); u != nil {
		t.Fatalf("unchanged answer gave an update: %+v", u)
	}
	if logs := h.logs.Take(); logs != "" {
		t.Errorf("unchanged answer logged:\n%s", logs)
	}

	// app-0 restarts on 127.0.0.2: same name, new URL, one log line.
	z.SetAddrs("app-0.app.test", "127.0.0.2")
	u = h.poll(t)
	if u == nil || u.Members[0].Name != "app-0.app.test:8080" || u.Members[0].URL != "http://127.0.0.2:8080" || len(u.Members) != 4 {
		t.Fatalf("after readdress: %+v", u)
	}
	if len(u.Events) != 1 || u.Events[0].Kind != Readdressed || u.Events[0].OldURL != "http://127.0.0.1:8080" {
		t.Errorf("events = %+v", u.Events)
	}
	if logs := h.logs.Take(); strings.Count(logs, "\n") != 1 || !strings.Contains(logs, "app-0.app.test:8080 readdressed: http://127.0.0.1:8080 -> http://127.0.0.2:8080") {
		t.Errorf("readdress logged:\n%s", logs)
	}

	// A short answer (1 of 4) is ignored twice and applied the third time.
	z.SetSRV("_http._tcp.app.test", "app-0.app.test.:8080")
	for i := range 2 {
		if u := h.poll(t); u != nil {
			t.Fatalf("short answer %d applied: %+v", i+1, u)
		}
	}
	if got := h.d.Status()[0].Members; got != 4 {
		t.Errorf("present members while guarded = %d, want 4", got)
	}
	if logs := h.logs.Take(); strings.Count(logs, "change=guarded") != 2 {
		t.Errorf("guarded answers logged:\n%s", logs)
	}
	// Back to full: the count is cleared.
	z.SetSRV("_http._tcp.app.test", "app-0.app.test.:8080", "app-1.app.test.:8080", "app-2.app.test.:8080", "app-3.app.test.:8080")
	if u := h.poll(t); u != nil {
		t.Fatalf("full answer after short ones changed something: %+v", u)
	}

	// SERVFAIL and a silent server keep the membership.
	for _, fail := range []func(bool){
		func(on bool) {
			rc := 0
			if on {
				rc = dns.RcodeServerFailure
			}
			z.SetRcode("_http._tcp.app.test", rc)
		},
		func(on bool) { z.SetSilent("_http._tcp.app.test", on) },
	} {
		fail(true)
		h.clock.Advance(time.Hour)
		if u := h.poll(t); u != nil {
			t.Fatalf("failed query changed the membership: %+v", u)
		}
		st := h.d.Status()[0]
		if st.Members != 4 || st.LastError == "" || len(h.d.Members()) != 4 {
			t.Errorf("after a failure: status %+v, %d members", st, len(h.d.Members()))
		}
		fail(false)
		if u := h.poll(t); u != nil {
			t.Fatalf("recovery changed the membership: %+v", u)
		}
		if st := h.d.Status()[0]; st.LastError != "" || !st.LastSuccess.Equal(h.clock.Now()) {
			t.Errorf("after recovery: status %+v", st)
		}
	}
	if st := h.d.Status()[0]; st.Errors != 2 || st.Updates != 2 {
		t.Errorf("counters: %+v, want 2 errors and 2 updates", st)
	}

	// Scale-in: app-3 absent at once, removed after remove_after.
	h.logs.Take()
	z.SetSRV("_http._tcp.app.test", "app-0.app.test.:8080", "app-1.app.test.:8080", "app-2.app.test.:8080")
	u = h.poll(t)
	if u == nil || len(u.Members) != 4 || !u.Members[3].Absent || u.Members[3].Name != "app-3.app.test:8080" {
		t.Fatalf("scale-in: %+v", u)
	}
	h.clock.Advance(5*time.Minute - time.Second)
	if u := h.poll(t); u != nil {
		t.Fatalf("removed before remove_after: %+v", u)
	}
	h.clock.Advance(time.Second)
	u = h.poll(t)
	if u == nil || len(u.Members) != 3 || u.Events[0].Kind != Removed {
		t.Fatalf("after remove_after: %+v", u)
	}
	if logs := h.logs.Take(); strings.Count(logs, "\n") != 2 || !strings.Contains(logs, "change=absent") || !strings.Contains(logs, "change=removed") {
		t.Errorf("scale-in logged:\n%s", logs)
	}
}

// A CNAME chain from the SRV name is followed for up to 8 hops. A longer
// one (or a loop) was not followed to its end: a failed query that keeps
// the last answer, not an empty answer that makes every member absent.
func TestDiscovererCNAMEChain(t *testing.T) {
	h := newHarness(t, 1, srvSource("_http._tcp.app.test")) // confirm 1: an empty answer would apply at once
	z := h.z
	for _, n := range []string{"a", "b", "c"} {
		z.SetAddrs(n+".test", "127.0.0.1")
	}
	// chain points the SRV name at a chain of hops named prefix-I.test,
	// the last of which has the SRV records of targets.
	chain := func(prefix string, hops int, targets ...string) {
		from := "_http._tcp.app.test"
		for i := range hops {
			to := fmt.Sprintf("%s-%d.test", prefix, i+1)
			z.SetCNAME(from, to)
			from = to
		}
		z.SetSRV(from, targets...)
	}

	chain("short", 1, "a.test.:1", "b.test.:1")
	if u := h.poll(t); u == nil || len(u.Members) != 2 {
		t.Fatalf("one hop: %+v", u)
	}
	chain("eight", 8, "a.test.:1", "b.test.:1", "c.test.:1")
	if u := h.poll(t); u == nil || len(u.Members) != 3 || u.Events[0].Kind != Added {
		t.Fatalf("eight hops: %+v", u)
	}
	h.logs.Take()

	for _, tt := range []struct {
		name  string
		setup func()
	}{
		{"nine hops", func() { chain("nine", 9, "a.test.:1") }},
		{"a loop", func() {
			z.SetCNAME("_http._tcp.app.test", "loop-1.test")
			z.SetCNAME("loop-1.test", "loop-2.test")
			z.SetCNAME("loop-2.test", "loop-1.test")
		}},
	} {
		tt.setup()
		if u := h.poll(t); u != nil {
			t.Fatalf("%s changed the membership: %+v", tt.name, u)
		}
		st := h.d.Status()[0]
		if st.Members != 3 || !strings.Contains(st.LastError, "CNAME chain longer than 8 hops") {
			t.Errorf("%s: status %+v, want 3 members and the chain's error", tt.name, st)
		}
		if ms := h.d.Members(); len(ms) != 3 || ms[0].Absent || ms[1].Absent || ms[2].Absent {
			t.Errorf("%s: members %+v, want the last answer's 3, present", tt.name, ms)
		}
	}
	if logs := h.logs.Take(); strings.Count(logs, "change=failed") != 1 {
		t.Errorf("one outage (nine hops, then a loop), want one failure line:\n%s", logs)
	}
}

// One outage, one warning: each retry of a query that keeps failing in
// the same way (a silent or refusing resolver, SERVFAIL) uses a new
// socket, and must not read as a new failure; a failure of another kind
// is a new warning. The error names the server asked, the configured
// resolver, for SRV and host sources alike.
func TestDiscovererFailureLogging(t *testing.T) {
	for _, src := range []Source{srvSource("_http._tcp.app.test"), hostSource("cache.test", 80)} {
		t.Run(src.Name(), func(t *testing.T) {
			h := newHarness(t, 3, src)
			z := h.z
			expect := func(what string, polls int, kind string, lines int, inError ...string) {
				t.Helper()
				for range polls {
					h.d.Poll(context.Background())
					select {
					case <-h.updates: // a reconfiguration's: the list is rebuilt, empty
					default:
					}
				}
				if n := strings.Count(h.logs.Take(), "change="+kind); n != lines {
					t.Errorf("%s: %d %s lines after %d polls, want %d", what, n, kind, polls, lines)
				}
				st := h.d.Status()[0]
				t.Logf("%s: %s", what, st.LastError)
				for _, s := range inError {
					if !strings.Contains(st.LastError, s) {
						t.Errorf("%s: last error %q does not say %q", what, st.LastError, s)
					}
				}
			}
			on := "lookup " + src.Name() + ". on " + z.Addr + ": "
			z.SetSilent(src.Name(), true)
			expect("silent server", 3, "failed", 1, on+"timeout")
			z.SetSilent(src.Name(), false)
			z.SetRcode(src.Name(), dns.RcodeServerFailure)
			expect("then SERVFAIL", 3, "failed", 1, on)
			z.SetRcode(src.Name(), 0) // NXDOMAIN: an answer
			expect("then NXDOMAIN", 1, "recovered", 1)
			if st := h.d.Status()[0]; st.LastError != "" || st.Errors != 6 {
				t.Errorf("after recovery: %+v", st)
			}

			// A resolver whose port is closed: refused, every time.
			pc, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			closed := pc.LocalAddr().String()
			pc.Close()
			opts := h.options(3, src)
			opts.Resolver = closed
			if err := h.d.Reconfigure(opts); err != nil {
				t.Fatal(err)
			}
			h.logs.Take()
			expect("refused", 3, "failed", 1, "lookup "+src.Name()+". on "+closed+": connection refused")
		})
	}
}

func TestDiscovererHostSource(t *testing.T) {
	h := newHarness(t, 3, hostSource("cache.test", 9000))
	h.z.SetAddrs("cache.test", "127.0.0.1", "127.0.0.2", "127.0.0.3", "::1")
	u := h.poll(t)
	want := "127.0.0.1:9000=127.0.0.1:9000+initial 127.0.0.2:9000=127.0.0.2:9000+initial 127.0.0.3:9000=127.0.0.3:9000+initial [::1]:9000=[::1]:9000+initial"
	if u == nil || showMembers(u.Members) != want {
		t.Fatalf("members: %+v", u)
	}
	// Removing an address makes only that member absent.
	h.z.SetAddrs("cache.test", "127.0.0.1", "127.0.0.3", "::1")
	u = h.poll(t)
	if u == nil || len(u.Events) != 1 || u.Events[0].Kind != Absent || u.Events[0].Name != "127.0.0.2:9000" {
		t.Fatalf("after removing an address: %+v", u)
	}
}

// Before the first answer there are no members; NXDOMAIN is an answer.
func TestDiscovererBeforeFirstAnswer(t *testing.T) {
	h := newHarness(t, 3, srvSource("_http._tcp.app.test"))
	h.z.SetRcode("_http._tcp.app.test", dns.RcodeServerFailure)
	if u := h.poll(t); u != nil || len(h.d.Members()) != 0 {
		t.Fatalf("failure before the first answer: %+v", u)
	}
	st := h.d.Status()[0]
	if !st.LastSuccess.IsZero() || st.LastError == "" || st.Source != "_http._tcp.app.test" {
		t.Errorf("status %+v", st)
	}
	h.z.SetRcode("_http._tcp.app.test", 0) // NXDOMAIN now
	if u := h.poll(t); u != nil {
		t.Fatalf("NXDOMAIN made members: %+v", u)
	}
	if st := h.d.Status()[0]; st.LastSuccess.IsZero() || st.LastError != "" {
		t.Errorf("NXDOMAIN is not a success: %+v", st)
	}
}

// Run polls at once, again on Resolve, and stops with its context.
func TestDiscovererRun(t *testing.T) {
	h := newHarness(t, 3, srvSource("_http._tcp.app.test"))
	h.z.SetSRV("_http._tcp.app.test", "a.test.:1")
	h.z.SetAddrs("a.test", "127.0.0.1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- h.d.Run(ctx) }()

	next := func() Update {
		t.Helper()
		select {
		case u := <-h.updates:
			return u
		case <-time.After(10 * time.Second):
			t.Fatal("no update")
			return Update{}
		}
	}
	if u := next(); showMembers(u.Members) != "a.test:1=127.0.0.1:1+initial" {
		t.Fatalf("first update %+v", u)
	}
	// The interval is an hour: only Resolve can bring the next answer.
	h.z.SetAddrs("a.test", "127.0.0.9")
	h.d.Resolve()
	if u := next(); showMembers(u.Members) != "a.test:1=127.0.0.9:1+initial" {
		t.Fatalf("after Resolve: %+v", u)
	}

	// Reconfigure: the kept source takes the new weight and scheme at
	// once (its members are kept, still initial); a new source is resolved.
	h.z.SetAddrs("cache.test", "127.0.0.7")
	opts := h.options(3, Source{SRV: "_http._tcp.app.test", Scheme: "https", Protocol: "h2", Weight: 2}, hostSource("cache.test", 80))
	if err := h.d.Reconfigure(opts); err != nil {
		t.Fatal(err)
	}
	u := next()
	for len(u.Members) < 2 { // the new source's answer may come in a second update
		u = next()
	}
	if got, want := showMembers(u.Members), "127.0.0.7:80=127.0.0.7:80+initial a.test:1=https://127.0.0.9:1+initial"; got != want {
		t.Fatalf("after Reconfigure\ngot  %s\nwant %s", got, want)
	}
	if m := u.Members[1]; m.Weight != 2 || m.Protocol != "h2" || m.Source != "_http._tcp.app.test" {
		t.Errorf("kept source's member %+v", m)
	}
	// Dropping a source drops its members.
	if err := h.d.Reconfigure(h.options(3, hostSource("cache.test", 80))); err != nil {
		t.Fatal(err)
	}
	if u := next(); showMembers(u.Members) != "127.0.0.7:80=127.0.0.7:80+initial" {
		t.Fatalf("after dropping a source: %+v", u)
	}

	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop with its context")
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	good := Options{Interval: time.Second, Timeout: time.Second, Confirm: 1, Sources: []Source{srvSource("a")}}
	for name, mutate := range map[string]func(*Options){
		"no sources":        func(o *Options) { o.Sources = nil },
		"zero interval":     func(o *Options) { o.Interval = 0 },
		"zero confirm":      func(o *Options) { o.Confirm = 0 },
		"negative remove":   func(o *Options) { o.RemoveAfter = -1 },
		"srv and host":      func(o *Options) { o.Sources = []Source{{SRV: "a", Host: "b", Port: 1, Scheme: "http", Weight: 1}} },
		"host without port": func(o *Options) { o.Sources = []Source{hostSource("b", 0)} },
		"bad scheme":        func(o *Options) { o.Sources = []Source{{SRV: "a", Scheme: "ftp", Weight: 1}} },
		"zero weight":       func(o *Options) { o.Sources = []Source{{SRV: "a", Scheme: "http"}} },
		"duplicate":         func(o *Options) { o.Sources = []Source{srvSource("a"), srvSource("a")} },
	} {
		o := good
		mutate(&o)
		if _, err := New(o); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
	if _, err := New(good); err != nil {
		t.Errorf("good options: %v", err)
	}
}
