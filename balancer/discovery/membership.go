package discovery

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
)

// The membership state machine. It does no I/O and reads no clock: every
// step takes the time, so tables of (answer or failure, time) → (members,
// events) test it completely. It is not safe for concurrent use; the
// Discoverer serialises it.
//
// Per member:
//
//	          in answer                 missing from answer
//	(new) ───────────────▶ present ─────────────────────────▶ absent(since t)
//	                          ▲   ◀───────── in answer ─────────  │
//	                          │            (Returned)             │ now ≥ t + remove_after
//	                          └ address changed: Readdressed      ▼
//	                                                           removed
//
// Per source, an answer leaving fewer than half of the present members
// (2 × len(answer) < present) waits for Confirm identical answers in a row;
// failures in between neither count nor reset, a different answer restarts
// the count, an answer that is not short clears it.
//
// A Kubernetes source is watched: its answers come with every change, not
// every interval, so counting them would mean nothing. There a short
// answer waits until the source has been short for confirm × interval
// (policy.confirmFor), whatever answers came meanwhile; an answer that is
// not short clears the wait.

// policy holds the settings the state machine needs.
type policy struct {
	removeAfter time.Duration
	confirm     int
	confirmFor  time.Duration // Kubernetes sources: confirm × interval
}

// entry is one member of a source.
type entry struct {
	addr        string    // address:port
	absentSince time.Time // zero while present
	initial     bool      // from the source's first answer
	terminating bool      // Kubernetes: serving and terminating
}

// sourceState is one source's membership.
type sourceState struct {
	src      Source
	answered bool // a successful answer came
	members  map[string]*entry
	present  int

	pending    []record  // a short answer waiting for confirmation
	seen       int       // how many times in a row it came
	shortSince time.Time // Kubernetes: when the source's answers became short; zero while not

	lastSuccess time.Time
	lastError   string // the last failure's message; "" after a success
	lastFailure string // failureKey of the last failure; "" after a success
	updates     uint64
	errors      uint64
}

func newSourceState(src Source) *sourceState {
	return &sourceState{src: src, members: map[string]*entry{}}
}

// url returns the URL of a member listening on addr.
func (s *sourceState) url(addr string) string { return s.src.Scheme + "://" + addr }

func (s *sourceState) event(kind EventKind, name, addr string) Event {
	return Event{Kind: kind, Source: s.src.Name(), Name: name, URL: s.url(addr)}
}

// answer applies a successful answer (sorted by name, names unique) at time
// now. It reports whether the membership changed and appends to events
// what happened. An answer equal to the membership changes nothing and
// allocates nothing.
func (s *sourceState) answer(p policy, recs []record, now time.Time, events []Event) (bool, []Event) {
	s.lastSuccess = now
	if s.lastError != "" {
		s.lastError, s.lastFailure = "", ""
		events = append(events, Event{Kind: Recovered, Source: s.src.Name()})
	}
	if s.answered && 2*len(recs) < s.present {
		var wait bool
		if wait, events = s.guard(p, recs, now, events); wait {
			return s.expire(p, now, events)
		}
	}
	s.pending, s.seen, s.shortSince = nil, 0, time.Time{}

	changed := false
	first := len(events)
	initial := !s.answered
	s.answered = true
	for _, r := range recs {
		var c bool
		c, events = s.applyRecord(r, initial, events)
		changed = changed || c
	}
	if len(recs) < s.present || changed {
		// Some present member may be missing from the answer.
		var c bool
		c, events = s.markAbsent(recs, now, events)
		changed = changed || c
	}
	// Map order is random: order this answer's events by name.
	slices.SortStableFunc(events[first:], func(a, b Event) int { return strings.Compare(a.Name, b.Name) })
	expired, events := s.expire(p, now, events)
	if changed || expired {
		s.updates++
	}
	return changed || expired, events
}

// guard holds back a short answer (one leaving fewer than half of the
// present members): it reports whether the answer must wait, a Kubernetes
// one until the source has been short for confirmFor, another until it
// came confirm times in a row, and appends the Guarded events.
func (s *sourceState) guard(p policy, recs []record, now time.Time, events []Event) (bool, []Event) {
	if s.src.Kubernetes.Service != "" {
		if s.shortSince.IsZero() {
			s.shortSince = now
			events = append(events, Event{Kind: Guarded, Source: s.src.Name(), Detail: fmt.Sprintf(
				"the EndpointSlices would leave %d of %d present members; applied once that has held for %s",
				len(recs), s.present, p.confirmFor)})
		}
		return now.Sub(s.shortSince) < p.confirmFor, events
	}
	if slices.Equal(s.pending, recs) {
		s.seen++
	} else {
		s.pending, s.seen = slices.Clone(recs), 1
	}
	if s.seen < p.confirm {
		events = append(events, Event{Kind: Guarded, Source: s.src.Name(), Detail: fmt.Sprintf(
			"the answer would leave %d of %d present members; applied once it comes %d times in a row (%d so far)",
			len(recs), s.present, p.confirm, s.seen)})
		return true, events
	}
	return false, events
}

// applyRecord applies one record of an answer: a new member (initial if
// from the source's first answer), a member back from absence, a new
// address, a change of terminating. It reports whether the member changed.
func (s *sourceState) applyRecord(r record, initial bool, events []Event) (bool, []Event) {
	e := s.members[r.name]
	changed := false
	switch {
	case e == nil:
		s.members[r.name] = &entry{addr: r.addr, initial: initial, terminating: r.terminating}
		s.present++
		events = append(events, s.event(Added, r.name, r.addr))
		if r.terminating {
			events = append(events, s.event(Terminating, r.name, r.addr))
		}
		return true, events
	case !e.absentSince.IsZero():
		e.absentSince = time.Time{}
		s.present++
		if e.addr != r.addr {
			old := s.url(e.addr)
			e.addr = r.addr
			ev := s.event(Readdressed, r.name, r.addr)
			ev.OldURL = old
			events = append(events, ev)
		}
		events = append(events, s.event(Returned, r.name, r.addr))
		changed = true
	case e.addr != r.addr:
		ev := s.event(Readdressed, r.name, r.addr)
		ev.OldURL = s.url(e.addr)
		e.addr = r.addr
		events = append(events, ev)
		changed = true
	}
	if e.terminating != r.terminating {
		e.terminating = r.terminating
		kind := Resumed
		if r.terminating {
			kind = Terminating
		}
		events = append(events, s.event(kind, r.name, r.addr))
		changed = true
	}
	return changed, events
}

// markAbsent marks absent since now each present member missing from recs
// (sorted by name). It reports whether any was.
func (s *sourceState) markAbsent(recs []record, now time.Time, events []Event) (bool, []Event) {
	changed := false
	for name, e := range s.members {
		if !e.absentSince.IsZero() {
			continue
		}
		if _, found := slices.BinarySearchFunc(recs, name, func(r record, n string) int { return strings.Compare(r.name, n) }); !found {
			e.absentSince = now
			s.present--
			events = append(events, s.event(Absent, name, e.addr))
			changed = true
		}
	}
	return changed, events
}

// fail records a failed query at time now: the membership stays as the last
// answer left it (absent members still expire). A Failed event is appended
// when the failure differs from the last one by its kind or server (see
// failureKey), so a resolver that stays down logs once.
func (s *sourceState) fail(p policy, err error, now time.Time, events []Event) (bool, []Event) {
	s.errors++
	s.lastError = err.Error()
	if key := failureKey(err); key != s.lastFailure {
		s.lastFailure = key
		events = append(events, Event{Kind: Failed, Source: s.src.Name(), Detail: s.lastError + "; keeping the last answer"})
	}
	return s.expire(p, now, events)
}

// expire removes the members absent for remove_after or longer at time now.
func (s *sourceState) expire(p policy, now time.Time, events []Event) (bool, []Event) {
	if len(s.members) == s.present {
		return false, events
	}
	first := len(events)
	for name, e := range s.members {
		if !e.absentSince.IsZero() && !now.Before(e.absentSince.Add(p.removeAfter)) {
			delete(s.members, name)
			events = append(events, s.event(Removed, name, e.addr))
		}
	}
	slices.SortFunc(events[first:], func(a, b Event) int { return strings.Compare(a.Name, b.Name) })
	return len(events) > first, events
}

// appendMembers appends the source's members, in no particular order.
func (s *sourceState) appendMembers(out []Member) []Member {
	name := s.src.Name()
	for n, e := range s.members {
		out = append(out, Member{
			Name: n, URL: s.url(e.addr), Weight: s.src.Weight, Protocol: s.src.Protocol, Source: name,
			Absent: !e.absentSince.IsZero(), Initial: e.initial, Terminating: e.terminating,
		})
	}
	return out
}

func (s *sourceState) status() Status {
	return Status{
		Source: s.src.Name(), Members: s.present, LastSuccess: s.lastSuccess, LastError: s.lastError,
		Updates: s.updates, Errors: s.errors,
	}
}

// mergeMembers returns every source's members sorted by name, each name
// once: when two sources discovered the same name, the earlier source's
// member is kept and a Conflict event appended.
func mergeMembers(sources []*sourceState, events []Event) ([]Member, []Event) {
	n := 0
	for _, s := range sources {
		n += len(s.members)
	}
	out := make([]Member, 0, n)
	order := make(map[string]int, len(sources))
	for i, s := range sources {
		order[s.src.Name()] = i
		out = s.appendMembers(out)
	}
	slices.SortFunc(out, func(a, b Member) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), cmp.Compare(order[a.Source], order[b.Source]))
	})
	kept := out[:0]
	for _, m := range out {
		if k := len(kept); k > 0 && kept[k-1].Name == m.Name {
			events = append(events, Event{Kind: Conflict, Source: m.Source, Name: m.Name, URL: m.URL,
				Detail: fmt.Sprintf("also discovered by %s; its member (%s) is kept", kept[k-1].Source, kept[k-1].URL)})
			continue
		}
		kept = append(kept, m)
	}
	return kept, events
}
