package balancer

import (
	"math"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/ring"
)

// installHoldLocked sets the hold of snapshot s, which is about to be
// installed (nil when off), through the pool's hold.Keeper, which keeps
// the one store (and the shared store's client) across reloads. Callers
// hold b.mu.
func (b *Balancer) installHoldLocked(s *snapshot) {
	var prev *hold.State
	if old := b.snap.Load(); old != nil {
		prev = old.hold
	}
	s.hold = b.hold.Install(s.holdSet, s.ring, prev)
}

// returnedLocked opens rule 14's window again when an upstream of the
// pool returned (see hold.State.Reopen). Callers hold b.mu.
func (b *Balancer) returnedLocked() {
	if s := b.snap.Load(); s != nil && s.hold != nil {
		s.hold.Reopen(b.nanotime())
	}
}

// holdBegin applies rule 11 to the request r with ring position h (its
// key's hash): the record hold.State.Find finds for it, then Decide,
// judging the held upstream as the walk judges any (availability, and
// fullness under bounded loads; slow start does not apply: the held
// upstream already serves the key).
func (b *Balancer) holdBegin(s *snapshot, r *http.Request, h uint64, q *hold.Request) {
	mono := b.nanotime()
	s.hold.Find(q, r, h, mono, b.clk)
	b.decide(s, q, mono)
	if q.Decision.Outcome == hold.Hold {
		moved := b.instead(s, h, q.Held)
		if moved {
			b.hold.Held.Add(1)
		}
		q.Shown = moved || s.holdNamed(q.Rec, q.Held)
	}
}

// decide is hold.State.Decide in snapshot s, judging the held upstream
// with standing.
func (b *Balancer) decide(s *snapshot, q *hold.Request, mono int64) {
	s.hold.Decide(q, s.drains.Load() > 0, mono, func(i int) hold.Standing { return b.standing(s, i, mono) })
}

// standing judges member i at time now as the walk would (admin state,
// health, breaker, bounded loads) for a key held on it: without slow
// start (the held upstream already serves the key) or an on_unavailable
// fail owner (it is the owner), and taking it in state drain (rule 12).
func (b *Balancer) standing(s *snapshot, i int, now int64) hold.Standing {
	w := walk{b: b, s: s, owner: -1, total: b.inflight.Load(), availW: math.Float64frombits(s.availW.Load()), now: now, held: true}
	if w.judge(i, 0) != ring.Accept {
		return hold.Unavailable
	}
	if s.Draining(i) {
		return hold.Draining
	}
	return hold.Ready
}

// instead reports whether holding position h on member i sends the
// request elsewhere than the ring would: ringlb_held_total counts those.
// A key the new ring leaves where it was is held too (so that it stays if
// a later change moves it), but not counted.
func (b *Balancer) instead(s *snapshot, h uint64, i int) bool {
	if s.ring.Owner(h) == i {
		return false
	}
	c, _ := b.pick(s, h, nil, nil)
	return c.Member != i
}

// choose returns the member for the request's next attempt (q nil: hold
// is off, or the position is random): the held member's choice first (see
// hold.State.Choice), then the ring's pick among those not tried.
func (b *Balancer) choose(s *snapshot, h uint64, tried []int, q *hold.Request) ring.Choice {
	if q != nil {
		if c, ok := s.hold.Choice(q, tried); ok {
			return c
		}
	}
	c, _ := b.pick(s, h, tried, nil)
	return c
}

// heldOf returns the upstream a request with ring position h and no
// cookie would be held on now (/debug/lookup's "held"), or "".
func (b *Balancer) heldOf(s *snapshot, h uint64) string {
	if s.hold == nil {
		return ""
	}
	mono := b.nanotime()
	var q hold.Request
	q.Rec, q.RecOK = s.hold.Store.Lookup(h, mono)
	b.decide(s, &q, mono)
	if q.Decision.Outcome != hold.Hold {
		return ""
	}
	if !s.holdNamed(q.Rec, q.Held) && !b.instead(s, h, q.Held) {
		return "" // held where the ring sends it anyway
	}
	return q.Rec.Upstream
}

// holdNamed says a hold on member held by rec is worth naming (the access
// log's "held", /debug/lookup's held) even where the ring would send the
// key anyway: it follows a record of another ring version, or keeps the
// key on a draining upstream.
func (s *snapshot) holdNamed(rec hold.Rec, held int) bool {
	return rec.Version != s.hold.Current || s.Draining(held)
}

// holdCollector reports ringlb_hold_keys and ringlb_held_total at scrape
// time (0 while hold is off).
type holdCollector struct{ b *Balancer }

func (c *holdCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.b.metrics.HoldKeys
	ch <- c.b.metrics.Held
	ch <- c.b.metrics.ShareErrors
	ch <- c.b.metrics.ShareLookups
	ch <- c.b.metrics.HotShare
}

func (c *holdCollector) Collect(ch chan<- prometheus.Metric) {
	n := 0
	if st := c.b.hold.Store(); st != nil {
		n = st.Len()
	}
	ch <- prometheus.MustNewConstMetric(c.b.metrics.HoldKeys, prometheus.GaugeValue, float64(n))
	ch <- prometheus.MustNewConstMetric(c.b.metrics.Held, prometheus.CounterValue, float64(c.b.hold.Held.Load()))
	sc, m := c.b.hold.Counts.Snapshot(), c.b.metrics
	ch <- prometheus.MustNewConstMetric(m.ShareErrors, prometheus.CounterValue, float64(sc.Errors))
	ch <- prometheus.MustNewConstMetric(m.ShareLookups, prometheus.CounterValue, float64(sc.Found), "found")
	ch <- prometheus.MustNewConstMetric(m.ShareLookups, prometheus.CounterValue, float64(sc.None), "none")
	ch <- prometheus.MustNewConstMetric(m.ShareLookups, prometheus.CounterValue, float64(sc.LookupErrors), "error")
	ch <- prometheus.MustNewConstMetric(m.HotShare, prometheus.GaugeValue, c.b.hot.HottestShare())
}
