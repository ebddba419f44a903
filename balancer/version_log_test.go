package balancer

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/internal/testutil/dnstest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// Every ring version change logs one line, msg="ring version", with the
// version, the members and the cause: start, discovery or reload. A change
// that keeps the version (an unchanged answer, a reload that changes no
// member) logs none. With discovery the start line has the empty ring's
// version; before, no line ever gave the version the members' arrival made.
func TestRingVersionLogged(t *testing.T) {
	z := dnstest.New(t)
	f := newFleet(t, z, 3)
	opts := discOptions(z, nil, srvSource(srvName))
	r := newDiscRig(t, z, opts)
	b := r.b
	versionLines := func() []string {
		var out []string
		for _, l := range strings.Split(r.logs.String(), "\n") {
			if strings.Contains(l, `msg="ring version"`) {
				out = append(out, l)
			}
		}
		return out
	}
	expect := func(n int, version, previous, cause string, members int) {
		t.Helper()
		testenv.Eventually(t, 5*time.Second, func() error {
			lines := versionLines()
			if len(lines) != n {
				return fmt.Errorf("%d ring version lines, want %d:\n%s", len(lines), n, strings.Join(lines, "\n"))
			}
			last := lines[n-1]
			for _, want := range []string{"version=" + version, "cause=" + cause, fmt.Sprintf("members=%d ", members)} {
				if !strings.Contains(last+" ", want) {
					return fmt.Errorf("the last ring version line lacks %q:\n%s", want, last)
				}
			}
			if previous != "" && !strings.Contains(last, "previous="+previous) {
				return fmt.Errorf("the last ring version line lacks previous=%s:\n%s", previous, last)
			}
			return nil
		})
	}

	// Start: no answer yet, the empty ring.
	v0 := b.Version()
	expect(1, v0, "", "start", 0)

	// The members arrive: one line with the new version.
	f.publish()
	testenv.Eventually(t, 5*time.Second, func() error { // by our poll or Run's first
		r.poll(t)
		if len(b.Members()) != 3 {
			return fmt.Errorf("%d members, want 3", len(b.Members()))
		}
		return nil
	})
	v3 := b.Version()
	expect(2, v3, v0, "discovery", 3)

	// The same answer again, and an absence: the version stays, no line.
	r.poll(t)
	f.live[2] = false
	f.publish()
	testenv.Eventually(t, 5*time.Second, func() error { // Run's own first poll may take the answer
		r.poll(t)
		if u := status(t, b, f.bes[2].name); !u.Absent {
			return fmt.Errorf("%s is not absent: %+v", f.bes[2].name, u)
		}
		return nil
	})
	if b.Version() != v3 {
		t.Fatal("an absence changed the version")
	}
	expect(2, v3, v0, "discovery", 3)

	// A reload adding a static upstream: a line with cause reload.
	u, _ := url.Parse(f.bes[0].srv.URL)
	opts.Upstreams = []options.Upstream{{Name: "static", URL: u, Addr: u.Host, Weight: 1}}
	v4, err := b.Update(opts)
	if err != nil {
		t.Fatal(err)
	}
	expect(3, v4, v3, "reload", 4)

	// The same config again: the version stays, no line.
	if _, err := b.Update(opts); err != nil {
		t.Fatal(err)
	}
	r.poll(t)
	expect(3, v4, v3, "reload", 4)
}
