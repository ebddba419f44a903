package config

// This file checks the ring block and the points the weights give.

import (
	"math"

	"github.com/ringlb/ringlb/ring"
)

// validateRing checks the ring block.
func (d *decoder) validateRing(r *Ring) {
	switch r.Placement {
	case "ringlb", "nginx":
	default:
		d.invalid("ring.placement", "must be ringlb or nginx, got %q", short(string(r.Placement)))
	}
	switch {
	case r.Placement == "nginx" && !d.isBad("ring.placement"):
		if r.PointsPerWeight != ring.NginxPointsPerWeight {
			d.invalid("ring.points_per_weight", "must be unset or %d under placement nginx, got %d", ring.NginxPointsPerWeight, r.PointsPerWeight)
		}
	case r.PointsPerWeight <= 0:
		d.invalid("ring.points_per_weight", "must be > 0, got %d", r.PointsPerWeight)
	case r.PointsPerWeight > maxPointsPerWeight:
		d.invalid("ring.points_per_weight", "must be <= %d, got %d", maxPointsPerWeight, r.PointsPerWeight)
	}
	if r.LoadFactor != 0 && !(r.LoadFactor > 1) {
		d.invalid("ring.load_factor", "must be 0 (off) or > 1, got %s", fmtFloat(r.LoadFactor))
	}
	if r.LoadFloor < 1 {
		d.invalid("ring.load_floor", "must be >= 1, got %d", r.LoadFloor)
	}
	if r.SlowStart < 0 {
		d.invalid("ring.slow_start", "must be >= 0, got %s", r.SlowStart)
	}
	switch r.OnUnavailable {
	case "remap":
	case "fail":
		// Overflow and warm-up both serve keys away from their owner.
		if (r.LoadFactor != 0 || r.SlowStart != 0) && !d.isBad("ring.load_factor") && !d.isBad("ring.slow_start") {
			d.invalid("ring.on_unavailable", "fail requires ring.load_factor: 0 (got %s) and ring.slow_start: 0s (got %s)",
				fmtFloat(r.LoadFactor), r.SlowStart)
		}
	default:
		d.invalid("ring.on_unavailable", "must be remap or fail, got %q", short(string(r.OnUnavailable)))
	}
}

// checkWeight checks an upstream's or a source's weight (field f) and
// returns the ring points it gives (0 when it is not sound, or when
// points_per_weight is not: ppwOK false). Under placement nginx (nginx)
// weights are whole numbers.
func (d *decoder) checkWeight(f string, w float64, c *Pool, ppwOK, nginx bool) int {
	switch {
	case !(w > 0):
		d.invalid(f, "must be > 0, got %s", fmtFloat(w))
	case nginx && w != math.Trunc(w):
		d.invalid(f, "must be a whole number under placement nginx, got %s", fmtFloat(w))
	case !ppwOK:
	case ring.PointsFor(c.Ring.PointsPerWeight, w) < 1:
		d.invalid(f, "too small: gives round(%d × %s) = 0 ring points", c.Ring.PointsPerWeight, fmtFloat(w))
	case ring.PointsFor(c.Ring.PointsPerWeight, w) > maxPointsPerMember:
		d.invalid(f, "too large: gives round(%d × %s) > %d ring points", c.Ring.PointsPerWeight, fmtFloat(w), maxPointsPerMember)
	default:
		return ring.PointsFor(c.Ring.PointsPerWeight, w)
	}
	return 0
}

// MaxPointsPerUpstream is the most ring points one upstream may own
// (round(points_per_weight × weight)).
const MaxPointsPerUpstream = maxPointsPerMember
