package inflight

import (
	"net/url"
	"testing"
)

// A URL's count is one whatever the case of its scheme and host and
// whether its default port is written; Take stops at the limit, Release
// forgets a count no Balancer uses.
func TestCounts(t *testing.T) {
	u := func(s string) *url.URL {
		p, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if Key(u("http://h.example")) != Key(u("http://H.example:80")) {
		t.Error("http://h.example and http://H.example:80 are counted apart")
	}
	if Key(u("https://h.example")) != "https://h.example:443" {
		t.Errorf("Key(https://h.example) = %q", Key(u("https://h.example")))
	}
	c := NewCounts()
	n := c.Acquire(Key(u("http://h.example")))
	if !n.Take(2) || !n.Take(2) || n.Take(2) {
		t.Error("Take under limit 2: want two requests to go and the third refused")
	}
	if !n.Busy(2) || n.Busy(0) {
		t.Error("Busy at the limit: want true under 2 and false without a limit")
	}
	if got := c.InFlight(u("HTTP://h.example:80")); got != 2 {
		t.Errorf("InFlight = %d, want 2", got)
	}
	n.Put()
	n.Put()
	c.Release(Key(u("http://h.example")))
	if got := c.InFlight(u("http://h.example")); got != 0 {
		t.Errorf("InFlight after release = %d, want 0", got)
	}
}

// Members sharing a URL share its count; a URL a Balancer stops using is
// released, one it keeps keeps its count.
func TestUses(t *testing.T) {
	u := func(s string) *url.URL {
		p, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	c := NewCounts()
	first := Uses{}
	a, b := first.Use(u("http://a:80"), nil, c), first.Use(u("http://A"), nil, c)
	gone := first.Use(u("http://b"), nil, c)
	if a != b || a == gone {
		t.Fatal("one URL spelled twice has two counts, or two URLs one")
	}
	a.Take(0)
	next := Uses{}
	if next.Use(u("http://a"), first, c) != a {
		t.Error("a URL in use again got a new count")
	}
	next.ReleaseUnused(first, c)
	gone.Take(0)
	if n := c.InFlight(u("http://b")); n != 0 {
		t.Errorf("InFlight of a released URL = %d, want 0 (forgotten)", n)
	}
	if n := c.InFlight(u("http://a")); n != 1 {
		t.Errorf("InFlight of a kept URL = %d, want 1", n)
	}
}
