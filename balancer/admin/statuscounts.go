package admin

// This file reads the status page's counts from the metrics: requests,
// errors, overflows and latency by upstream, and hold's figures, by pool.

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// latency formats a mean response time from a histogram's sum and count.
func latency(sum, count float64) string {
	if count == 0 {
		return "–"
	}
	ms := 1000 * sum / count
	if ms < 10 {
		return strconv.FormatFloat(ms, 'f', 2, 64) + " ms"
	}
	return strconv.FormatFloat(ms, 'f', 0, 64) + " ms"
}

// counts are what the page reads from the metrics for one pool, by
// upstream: requests answered (every code), 5xx answers, overflows, and
// the request duration histogram's sum and count.
type counts struct {
	requests, errors, overflows, durSum, durCount map[string]float64
	holdKeys, held                                float64 // ringlb_hold_keys, ringlb_held_total
}

// newCounts returns empty counts.
func newCounts() *counts {
	return &counts{requests: map[string]float64{}, errors: map[string]float64{}, overflows: map[string]float64{},
		durSum: map[string]float64{}, durCount: map[string]float64{}}
}

// gatherCounts gathers g once and returns every pool's counts, by pool
// label, and reloads, every reload attempt counted; ok is false if g
// could not be gathered.
func gatherCounts(g prometheus.Gatherer) (byPool map[string]*counts, reloads float64, ok bool) {
	byPool = map[string]*counts{}
	if g == nil {
		return byPool, 0, false
	}
	mfs, err := g.Gather()
	if err != nil && len(mfs) == 0 {
		return byPool, 0, false
	}
	for _, mf := range mfs {
		name := mf.GetName()
		if name == "ringlb_config_reloads_total" {
			for _, m := range mf.GetMetric() {
				reloads += m.GetCounter().GetValue()
			}
			continue
		}
		for _, m := range mf.GetMetric() {
			var up, code, pool string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "upstream":
					up = l.GetValue()
				case "code":
					code = l.GetValue()
				case "pool":
					pool = l.GetValue()
				}
			}
			c := byPool[pool]
			if c == nil {
				c = newCounts()
				byPool[pool] = c
			}
			switch name {
			case "ringlb_requests_total":
				v := m.GetCounter().GetValue()
				c.requests[up] += v
				if len(code) == 3 && code[0] == '5' {
					c.errors[up] += v
				}
			case "ringlb_overflow_total":
				c.overflows[up] += m.GetCounter().GetValue()
			case "ringlb_request_duration_seconds":
				c.durSum[up] += m.GetHistogram().GetSampleSum()
				c.durCount[up] += float64(m.GetHistogram().GetSampleCount())
			case "ringlb_hold_keys":
				c.holdKeys = m.GetGauge().GetValue()
			case "ringlb_held_total":
				c.held = m.GetCounter().GetValue()
			}
		}
	}
	return byPool, reloads, true
}

// heldShare formats the share of the requests answered that a hold sent
// to another upstream than the ring's choice, or "–" before any request.
func heldShare(c *counts) string {
	total := 0.0
	for _, n := range c.requests {
		total += n
	}
	if total == 0 {
		return "–"
	}
	return formatPct(c.held / total)
}
