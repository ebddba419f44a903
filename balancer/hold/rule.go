package hold

import "time"

// Standing is what the balancer knows, at request time, of the upstream a
// record holds a key on.
type Standing uint8

const (
	// NotMember: the upstream is not in the current ring (a reload or
	// discovery removed it). Its keys follow the ring.
	NotMember Standing = iota
	// Unavailable: a member, but it may not take the request now: its
	// health check says down, its breaker is open, discovery has it
	// absent, or (under bounded loads) it is full.
	Unavailable
	// Ready: a member that is available and, under bounded loads, not full.
	Ready
	// Draining: as Ready, in admin state drain (rule 12): it takes only
	// the keys held on it, and those whatever the record's version.
	Draining
)

// Outcome is what Rule.Decide tells the balancer to do with a request.
type Outcome uint8

const (
	// Route: no hold applies; pick by the ring as usual.
	Route Outcome = iota
	// Hold: send the request to the record's upstream instead of the
	// ring's choice (count it in ringlb_held_total). It goes through the
	// same breaker, retry and metrics paths as any choice.
	Hold
	// HoldFail: under on_unavailable fail, the held upstream is the key's
	// owner and it is unavailable: answer 503, as for an unavailable owner.
	HoldFail
)

// Reason says why Decide decided as it did; /debug/lookup and tests use it.
type Reason uint8

const (
	NoRecord       Reason = iota // no record (or hold is off)
	Expired                      // the record is idle for idle or longer
	CurrentVersion               // on_return home: the record was made under the current ring, which it never overrides
	Removed                      // the held upstream is no longer a member
	NotAvailable                 // the held upstream is unavailable or full
	Holding                      // the record applies
	HoldingDrain                 // on_return home: the record applies although made under the current ring: its upstream drains (rule 12)
)

var reasonNames = [...]string{"no_record", "expired", "current_version", "removed", "unavailable", "holding", "holding_drain"}

// OnReturn is hold.on_return: what a key in use does when the upstream
// the ring prefers for it comes back.
type OnReturn string

const (
	// Stay: a key in use elsewhere stays there until it goes idle; new
	// and idle keys go to their ring owner. The default.
	Stay OnReturn = "stay"
	// Home: exactly the returning upstream's keys return, in use or not
	// (rule 2).
	Home OnReturn = "home"
)

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return "unknown"
}

// Decision is the result of Rule.Decide.
type Decision struct {
	Outcome Outcome
	Reason  Reason
}

// Rule is routing rule 11, in one place. Its zero value (Idle 0) never
// holds.
type Rule struct {
	// Idle is hold.idle: a record older than this is void. <= 0: hold off.
	Idle time.Duration
	// Fail is ring.on_unavailable == fail: a held key's owner is its held
	// upstream, so an unavailable held upstream means 503, not the ring.
	Fail bool
	// Home is on_return home: a record made under the current ring
	// version overrides the ring only while its upstream drains. false
	// (on_return stay, the default): a record overrides the ring whatever
	// its version.
	Home bool
	// Drains says some member is in admin state drain (rule 12): under
	// Home, records made under the current version are then judged too,
	// since one naming a Draining upstream holds its key there. The
	// balancer sets it per request; false spares those records the
	// standing question.
	Drains bool
}

// Decide applies rule 11 to a request whose key has record rec (found
// false: none, from this process's Store or from a valid cookie) when the
// current ring has version current, at time now (the clock of rec.LastUse).
// standing is asked about rec.Upstream only when the record otherwise
// applies, and is not kept.
//
// The record applies when it is younger than Idle; then a Ready or
// Draining upstream gets the request (Hold), an Unavailable one gives
// HoldFail under Fail and Route otherwise, and a NotMember gives Route.
// So under on_return stay a key in use stays where it was served when
// the ring's preferred upstream returns (after an ejection, a drain or
// maint, slow start) or when it overflowed there under bounded loads.
//
// Under Home a record made under the current version is followed only
// when its upstream is Draining (rule 12: a draining upstream keeps the
// keys in use on it, whatever their version); otherwise never: an
// ejection is not a membership change, so rule 2 (when an upstream
// returns, exactly its keys return) holds with hold on.
//
// Under Fail, an Unavailable upstream of a record made under the current
// version gives Route: the ring's owner decides, as for any key of the
// current version.
func (r Rule) Decide(rec Rec, found bool, current Version, now int64, standing func(upstream string) Standing) Decision {
	switch {
	case r.Idle <= 0 || !found:
		return Decision{Route, NoRecord}
	case now-rec.LastUse >= int64(r.Idle):
		return Decision{Route, Expired}
	case rec.Version == current && r.Home:
		if r.Drains && standing(rec.Upstream) == Draining {
			return Decision{Hold, HoldingDrain}
		}
		return Decision{Route, CurrentVersion}
	}
	switch standing(rec.Upstream) {
	case Ready, Draining:
		return Decision{Hold, Holding}
	case Unavailable:
		if r.Fail && rec.Version != current {
			return Decision{HoldFail, NotAvailable}
		}
		return Decision{Route, NotAvailable}
	}
	return Decision{Route, Removed}
}

// After returns what to record once a request was served by served: the
// held upstream and the record's own version when the hold was followed
// and that upstream served it (so the record keeps overriding the new ring
// while the key stays in use), else served and the current version.
// Record it in the Store and, with a cookie, compare it with the request's
// cookie through NeedSet.
func After(d Decision, rec Rec, served string, current Version) (upstream string, v Version) {
	if d.Outcome == Hold && served == rec.Upstream {
		return rec.Upstream, rec.Version
	}
	return served, current
}
