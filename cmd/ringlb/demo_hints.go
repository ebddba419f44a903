package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/ring"
)

// demoSpread returns the users (1, 2, ...) of the demo's "users spread
// over the upstreams" hint: the first ones that together reach every
// upstream, one each at least, then the smallest others up to eight. k
// gives each user's key; the config's ring places it.
func demoSpread(cfg *config.Config, k demoKey) []string {
	want := max(8, len(cfg.Upstreams))
	r, err := ring.New(ringMembers(cfg.Upstreams), ringOptions(cfg))
	if err != nil || r.Len() == 0 {
		return nil
	}
	covered := map[int]bool{}
	var picked []int
	for u := 1; u <= 10000 && len(covered) < r.Len() && len(picked) < want; u++ {
		if o := r.Owner(r.Hash(k.key(strconv.Itoa(u)))); !covered[o] {
			covered[o] = true
			picked = append(picked, u)
		}
	}
	taken := map[int]bool{}
	for _, u := range picked {
		taken[u] = true
	}
	for u := 1; len(picked) < want; u++ {
		if !taken[u] {
			picked = append(picked, u)
		}
	}
	slices.Sort(picked)
	out := make([]string, len(picked))
	for i, u := range picked {
		out[i] = strconv.Itoa(u)
	}
	return out
}

// demoSlowStartDelay is how long after its readmission an upstream that
// slow-starts over cfg's ring.slow_start takes key back: slow start
// activates its points in a fixed order (the first ceil(f × n) at
// fraction f of the window), and the key comes home once the first point
// of the upstream's that its walk meets, before any other upstream's,
// is active. 0 without slow start.
func demoSlowStartDelay(cfg *config.Config, key, upstream string) time.Duration {
	r, err := ring.New(ringMembers(cfg.Upstreams), ringOptions(cfg))
	if err != nil || cfg.Ring.SlowStart <= 0 {
		return 0
	}
	m := r.Index(upstream)
	if m < 0 {
		return 0
	}
	n, h := r.Points(m), r.Hash(key)
	for a := 1; a <= n; a++ { // a: the upstream's active points
		judge := func(member, seq int) ring.Reason {
			if member == m && seq >= a {
				return ring.SlowStart
			}
			return ring.Accept
		}
		if c, _ := r.Pick(h, judge, nil); c.Member == m {
			// ActivePoints(n, f) >= a once f > (a-1)/n.
			return time.Duration(float64(cfg.Ring.SlowStart) * float64(a-1) / float64(n))
		}
	}
	return cfg.Ring.SlowStart
}

// demoOwner returns the upstream owning key on the config's ring.
func demoOwner(cfg *config.Config, key string) *config.Upstream {
	r, err := ring.New(ringMembers(cfg.Upstreams), ringOptions(cfg))
	if err != nil || len(cfg.Upstreams) < 2 {
		return nil
	}
	name := r.Members()[r.Owner(r.Hash(key))].Name
	for i := range cfg.Upstreams {
		if cfg.Upstreams[i].Name == name {
			return &cfg.Upstreams[i]
		}
	}
	return nil
}

// demoFailHint explains, in separate steps, how to make the key's owner
// fail and heal, and how long ringlb takes to notice each, and, with slow
// start, to give the key back (demoSlowStartDelay).
func demoFailHint(cfg *config.Config, u *config.Upstream, key, again string) string {
	var b strings.Builder
	base := u.URL.String()
	moved, back := "its users move", "its users are back"
	if cfg.Ring.OnUnavailable == "fail" {
		moved, back = "its keys get 503 (on_unavailable: fail)", "its keys are served again"
	} else if cfg.Hold.On() && cfg.Hold.OnReturn != "home" {
		back = fmt.Sprintf("its keys not in use are back; this one, used on another upstream meanwhile,\n"+
			"  stays there until idle for %s (hold.on_return: stay; home would bring it back now)", cfg.Hold.Idle)
	}
	switch {
	case cfg.Health != nil:
		h := cfg.Health
		fmt.Fprintf(&b, "Make %s (the upstream of that key) fail its health check:\n", u.Name)
		fmt.Fprintf(&b, "  curl -s -X POST '%s/_demo/fail?health=1'\n", base)
		fmt.Fprintf(&b, "  ringlb ejects it after %d failed probes %s apart (about %s); then %s:\n",
			h.Fall, h.Interval, time.Duration(h.Fall)*h.Interval, moved)
		fmt.Fprintf(&b, "  %s\n", again)
		readmit := time.Duration(h.Rise) * h.Interval
		if ss := cfg.Ring.SlowStart; ss > 0 {
			d := demoSlowStartDelay(cfg, key, u.Name)
			fmt.Fprintf(&b, "Heal it; after %d passing probes (about %s) ringlb readmits it, and with slow_start %s\n", h.Rise, readmit, ss)
			fmt.Fprintf(&b, "  it takes its keys back gradually, this one about %s later: %s after about %s:\n",
				d.Round(100*time.Millisecond), back, (readmit + d).Round(100*time.Millisecond))
		} else {
			fmt.Fprintf(&b, "Heal it; after %d passing probes (about %s) %s:\n", h.Rise, readmit, back)
		}
		fmt.Fprintf(&b, "  curl -s -X POST %s/_demo/recover\n", base)
	case cfg.Breaker.ConsecutiveFailures > 0:
		br := cfg.Breaker
		fmt.Fprintf(&b, "Make %s (the upstream of that key) answer 503 (no health block: its breaker decides):\n", u.Name)
		fmt.Fprintf(&b, "  curl -s -X POST '%s/_demo/fail?requests=1'\n", base)
		fmt.Fprintf(&b, "  after %d failed requests its breaker opens for %s and %s:\n", br.ConsecutiveFailures, br.OpenTimeout, moved)
		fmt.Fprintf(&b, "  for i in $(seq %d); do %s; done\n", br.ConsecutiveFailures+1, again)
		if ss := cfg.Ring.SlowStart; ss > 0 {
			fmt.Fprintf(&b, "Heal it; once the breaker's open period ends, one request closes it again, and with\n")
			fmt.Fprintf(&b, "  slow_start %s this key is back about %s after that:\n", ss, demoSlowStartDelay(cfg, key, u.Name).Round(100*time.Millisecond))
		} else {
			fmt.Fprintf(&b, "Heal it; once the breaker's open period ends, one request closes it again:\n")
		}
		fmt.Fprintf(&b, "  curl -s -X POST %s/_demo/recover\n", base)
	}
	return b.String()
}
