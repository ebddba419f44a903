package hold

import (
	"testing"
	"time"
)

func TestRuleDecide(t *testing.T) {
	const idle = 10 * time.Second
	v1, v2 := VersionOf("v1"), VersionOf("v2")
	now := 100 * sec
	rec := Rec{Upstream: "a", Version: v1, LastUse: now - 5*sec}
	standing := func(s Standing) func(string) Standing {
		return func(u string) Standing {
			if u != "a" {
				t.Errorf("standing asked about %q, want the held upstream a", u)
			}
			return s
		}
	}
	never := func(string) Standing {
		t.Error("standing asked though the record does not apply")
		return Ready
	}
	tests := []struct {
		name     string
		rule     Rule
		rec      Rec
		found    bool
		current  Version
		standing func(string) Standing
		want     Decision
	}{
		{"hold off", Rule{Idle: 0}, rec, true, v2, never, Decision{Route, NoRecord}},
		{"no record", Rule{Idle: idle}, Rec{}, false, v2, never, Decision{Route, NoRecord}},
		{"record from another ring, ready", Rule{Idle: idle}, rec, true, v2, standing(Ready), Decision{Hold, Holding}},
		{"just younger than idle", Rule{Idle: idle}, Rec{"a", v1, now - int64(idle) + 1}, true, v2, standing(Ready), Decision{Hold, Holding}},
		{"idle for exactly idle", Rule{Idle: idle}, Rec{"a", v1, now - int64(idle)}, true, v2, never, Decision{Route, Expired}},
		// on_return home, rule 2: an ejection is not a membership change.
		// A record made under the current ring (e.g. on the upstream a
		// key was remapped to while its owner was out) never overrides
		// the ring, so the key returns with its owner.
		{"record from the current ring", Rule{Idle: idle, Home: true}, rec, true, v1, never, Decision{Route, CurrentVersion}},
		{"current ring, fail mode", Rule{Idle: idle, Home: true, Fail: true}, rec, true, v1, never, Decision{Route, CurrentVersion}},
		{"held upstream removed", Rule{Idle: idle}, rec, true, v2, standing(NotMember), Decision{Route, Removed}},
		{"held upstream removed, fail mode", Rule{Idle: idle, Fail: true}, rec, true, v2, standing(NotMember), Decision{Route, Removed}},
		{"held upstream unavailable", Rule{Idle: idle}, rec, true, v2, standing(Unavailable), Decision{Route, NotAvailable}},
		// Under on_unavailable fail the held upstream is the key's owner.
		{"held upstream unavailable, fail mode", Rule{Idle: idle, Fail: true}, rec, true, v2, standing(Unavailable), Decision{HoldFail, NotAvailable}},
		{"held upstream ready, fail mode", Rule{Idle: idle, Fail: true}, rec, true, v2, standing(Ready), Decision{Hold, Holding}},
		// Rule 12: a draining upstream keeps the keys held on it, whatever
		// the record's version; under home with no member draining,
		// records of the current ring are not even looked at.
		{"draining, record from another ring", Rule{Idle: idle, Drains: true}, rec, true, v2, standing(Draining), Decision{Hold, Holding}},
		{"draining, record from the current ring", Rule{Idle: idle, Home: true, Drains: true}, rec, true, v1, standing(Draining), Decision{Hold, HoldingDrain}},
		{"draining, current ring, fail mode", Rule{Idle: idle, Home: true, Drains: true, Fail: true}, rec, true, v1, standing(Draining), Decision{Hold, HoldingDrain}},
		{"another member drains, current ring", Rule{Idle: idle, Home: true, Drains: true}, rec, true, v1, standing(Ready), Decision{Route, CurrentVersion}},
		{"draining but unavailable, current ring", Rule{Idle: idle, Home: true, Drains: true}, rec, true, v1, standing(Unavailable), Decision{Route, CurrentVersion}},
		{"draining, current ring, expired", Rule{Idle: idle, Home: true, Drains: true}, Rec{"a", v1, now - int64(idle)}, true, v1, never, Decision{Route, Expired}},
		// on_return stay (the default): a record younger than idle whose
		// upstream can take the key wins whatever its version, so a
		// session that began on a neighbour while its owner was out
		// stays there when the owner returns.
		{"stay: record from the current ring", Rule{Idle: idle}, rec, true, v1, standing(Ready), Decision{Hold, Holding}},
		{"stay: current ring, draining", Rule{Idle: idle, Drains: true}, rec, true, v1, standing(Draining), Decision{Hold, Holding}},
		{"stay: current ring, unavailable", Rule{Idle: idle}, rec, true, v1, standing(Unavailable), Decision{Route, NotAvailable}},
		{"stay: current ring, unavailable, fail mode", Rule{Idle: idle, Fail: true}, rec, true, v1, standing(Unavailable), Decision{Route, NotAvailable}},
		{"stay: current ring, removed", Rule{Idle: idle}, rec, true, v1, standing(NotMember), Decision{Route, Removed}},
		{"stay: current ring, expired", Rule{Idle: idle}, Rec{"a", v1, now - int64(idle)}, true, v1, never, Decision{Route, Expired}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.Decide(tt.rec, tt.found, tt.current, now, tt.standing); got != tt.want {
				t.Errorf("Decide = %+v (%s), want %+v (%s)", got, got.Reason, tt.want, tt.want.Reason)
			}
		})
	}
}

func TestAfter(t *testing.T) {
	v1, v2 := VersionOf("v1"), VersionOf("v2")
	rec := Rec{Upstream: "a", Version: v1, LastUse: 1}
	hold := Decision{Hold, Holding}
	for _, tt := range []struct {
		name   string
		d      Decision
		served string
		wantU  string
		wantV  Version
	}{
		// The held upstream served: the record keeps its old version, so
		// it keeps overriding the new ring while the key is in use.
		{"held and served there", hold, "a", "a", v1},
		// A retry moved it elsewhere: the key now lives there, under the
		// current ring.
		{"held, served elsewhere after a retry", hold, "b", "b", v2},
		{"routed as usual", Decision{Route, Expired}, "b", "b", v2},
		{"routed as usual to the old upstream", Decision{Route, CurrentVersion}, "a", "a", v2},
	} {
		if u, v := After(tt.d, rec, tt.served, v2); u != tt.wantU || v != tt.wantV {
			t.Errorf("%s: After = %s, %x; want %s, %x", tt.name, u, v, tt.wantU, tt.wantV)
		}
	}
}

// The store and the rule together, over a membership change and an
// ejection, as the balancer will drive them (on_return home).
func TestRuleWithStore(t *testing.T) {
	const idle = 10 * time.Second
	s := NewStore(StoreOptions{MaxKeys: 100, Idle: idle})
	r := Rule{Idle: idle, Home: true}
	v1, v2 := VersionOf("v1"), VersionOf("v2")
	ready := func(string) Standing { return Ready }
	serve := func(key uint64, ringChoice string, cur Version, now int64) string {
		rec, ok := s.Lookup(key, now)
		d := r.Decide(rec, ok, cur, now, ready)
		served := ringChoice
		if d.Outcome == Hold {
			served = rec.Upstream
		}
		u, v := After(d, rec, served, cur)
		s.Record(key, u, v, now)
		return served
	}
	// Under v1 the key lives on a; v2 gives it to b.
	if got := serve(7, "a", v1, 1*sec); got != "a" {
		t.Fatalf("v1: %s", got)
	}
	// In use: stays on a as long as it is used within idle.
	for now := 2 * sec; now < 60*sec; now += 9 * sec {
		if got := serve(7, "b", v2, now); got != "a" {
			t.Fatalf("v2 at %ds: served by %s, want a (held)", now/sec, got)
		}
	}
	// Idle for longer than idle: follows the ring.
	if got := serve(7, "b", v2, 80*sec); got != "b" {
		t.Fatalf("after idle: %s, want b", got)
	}
	// An ejection under v2 (ring choice c while b is out) and b's return:
	// the record made under v2 never overrides, so the key returns to b.
	if got := serve(7, "c", v2, 81*sec); got != "c" {
		t.Fatalf("b ejected: %s, want c", got)
	}
	if got := serve(7, "b", v2, 82*sec); got != "b" {
		t.Fatalf("b returned: %s, want b", got)
	}
}

// on_return stay: a key that moved while its owner was ejected stays
// where it moved for as long as it is in use after the owner returns,
// then goes home; under one ring version throughout.
func TestRuleWithStoreStay(t *testing.T) {
	const idle = 10 * time.Second
	s := NewStore(StoreOptions{MaxKeys: 100, Idle: idle})
	r := Rule{Idle: idle}
	v := VersionOf("v1")
	out := map[string]bool{}
	standing := func(u string) Standing {
		if out[u] {
			return Unavailable
		}
		return Ready
	}
	serve := func(key uint64, ringChoice string, now int64) string {
		rec, ok := s.Lookup(key, now)
		d := r.Decide(rec, ok, v, now, standing)
		served := ringChoice
		if d.Outcome == Hold {
			served = rec.Upstream
		}
		u, rv := After(d, rec, served, v)
		s.Record(key, u, rv, now)
		return served
	}
	if got := serve(7, "b", 1*sec); got != "b" {
		t.Fatalf("start: %s", got)
	}
	out["b"] = true // b ejected: the walk passes it over, c takes the key
	if got := serve(7, "c", 2*sec); got != "c" {
		t.Fatalf("b ejected: %s, want c", got)
	}
	delete(out, "b") // b is back: the key in use stays on c
	for now := 3 * sec; now < 60*sec; now += 9 * sec {
		if got := serve(7, "b", now); got != "c" {
			t.Fatalf("b returned, at %ds: served by %s, want c (in use there)", now/sec, got)
		}
	}
	if got := serve(7, "b", 80*sec); got != "b" {
		t.Fatalf("idle for longer than idle: %s, want b", got)
	}
	// A new key goes to its ring owner at once.
	if got := serve(8, "b", 81*sec); got != "b" {
		t.Fatalf("new key: %s, want b", got)
	}
}
