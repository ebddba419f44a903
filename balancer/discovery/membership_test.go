package discovery

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// step is one poll of a source: an answer (answer, possibly empty) or a
// failure, at a time, and what must follow.
type step struct {
	at      time.Duration // since the start
	answer  []record      // the answer; ignored when fail
	fail    string        // non-empty: the query fails with this error
	changed bool          // the membership changed
	members string        // "name=addr" sorted, space-separated; "+absent", "+initial" flags
	events  string        // "kind name", comma-separated, in order
	present int           // Status.Members; -1: not checked
}

// showMembers formats members for step.members (URL without the scheme).
func showMembers(ms []Member) string {
	var parts []string
	for _, m := range ms {
		s := m.Name + "=" + strings.TrimPrefix(m.URL, "http://")
		if m.Absent {
			s += "+absent"
		}
		if m.Initial {
			s += "+initial"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}

func showEvents(es []Event) string {
	var parts []string
	for _, e := range es {
		s := e.Kind.String()
		if e.Name != "" {
			s += " " + e.Name
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ")
}

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// The state machine, step by step: every rule of membership, with the
// time injected.
func TestMembershipSteps(t *testing.T) {
	four := recs("a:1=10.0.0.1:1", "b:1=10.0.0.2:1", "c:1=10.0.0.3:1", "d:1=10.0.0.4:1")
	fourMembers := "a:1=10.0.0.1:1+initial b:1=10.0.0.2:1+initial c:1=10.0.0.3:1+initial d:1=10.0.0.4:1+initial"
	first := step{answer: four, changed: true, members: fourMembers,
		events: "added a:1, added b:1, added c:1, added d:1", present: 4}

	tests := []struct {
		name  string
		pol   policy
		steps []step
	}{
		{
			name: "first answer is initial; later members are not; an unchanged answer changes nothing",
			steps: []step{
				first,
				{at: 5 * time.Second, answer: four, members: fourMembers, present: 4},
				{at: 10 * time.Second, answer: append(slices.Clone(four), recs("e:1=10.0.0.5:1")...), changed: true,
					members: fourMembers + " e:1=10.0.0.5:1", events: "added e:1", present: 5},
			},
		},
		{
			name: "an address change keeps the name and changes the URL",
			steps: []step{
				{answer: recs("a:1=10.0.0.1:1", "b:1=10.0.0.2:1"), changed: true, members: "a:1=10.0.0.1:1+initial b:1=10.0.0.2:1+initial", events: "added a:1, added b:1", present: 2},
				{at: time.Second, answer: recs("a:1=127.0.0.2:1", "b:1=10.0.0.2:1"), changed: true,
					members: "a:1=127.0.0.2:1+initial b:1=10.0.0.2:1+initial", events: "readdressed a:1", present: 2},
			},
		},
		{
			name: "scale-in: absent at once, removed after remove_after, even while queries fail",
			steps: []step{
				first,
				{at: time.Minute, answer: four[:3], changed: true,
					members: "a:1=10.0.0.1:1+initial b:1=10.0.0.2:1+initial c:1=10.0.0.3:1+initial d:1=10.0.0.4:1+absent+initial",
					events:  "absent d:1", present: 3},
				{at: time.Minute + 4*time.Minute + 59*time.Second, answer: four[:3],
					members: "a:1=10.0.0.1:1+initial b:1=10.0.0.2:1+initial c:1=10.0.0.3:1+initial d:1=10.0.0.4:1+absent+initial", present: 3},
				{at: 6 * time.Minute, fail: "i/o timeout", changed: true,
					members: "a:1=10.0.0.1:1+initial b:1=10.0.0.2:1+initial c:1=10.0.0.3:1+initial",
					events:  "failed, removed d:1", present: 3},
				{at: 7 * time.Minute, answer: four, changed: true,
					members: "a:1=10.0.0.1:1+initial b:1=10.0.0.2:1+initial c:1=10.0.0.3:1+initial d:1=10.0.0.4:1",
					events:  "recovered, added d:1", present: 4},
			},
		},
		{
			name: "a member back within remove_after returns, at its new address",
			steps: []step{
				first,
				{at: time.Minute, answer: four[1:], changed: true, events: "absent a:1", present: 3,
					members: "a:1=10.0.0.1:1+absent+initial b:1=10.0.0.2:1+initial c:1=10.0.0.3:1+initial d:1=10.0.0.4:1+initial"},
				{at: 2 * time.Minute, answer: append(recs("a:1=10.0.0.9:1"), four[1:]...), changed: true, events: "readdressed a:1, returned a:1", present: 4,
					members: "a:1=10.0.0.9:1+initial b:1=10.0.0.2:1+initial c:1=10.0.0.3:1+initial d:1=10.0.0.4:1+initial"},
			},
		},
		{
			name: "remove_after 0 removes a missing member at once",
			pol:  policy{removeAfter: 0, confirm: 3},
			steps: []step{
				first,
				{at: time.Second, answer: four[:3], changed: true, events: "absent d:1, removed d:1", present: 3,
					members: "a:1=10.0.0.1:1+initial b:1=10.0.0.2:1+initial c:1=10.0.0.3:1+initial"},
			},
		},
		{
			name: "mass removal waits for confirm identical answers; failures neither count nor reset",
			steps: []step{
				first,
				{at: 1 * time.Second, answer: four[:1], members: fourMembers, events: "guarded", present: 4},
				{at: 2 * time.Second, fail: "server misbehaving", members: fourMembers, events: "failed", present: 4},
				{at: 3 * time.Second, answer: four[:1], members: fourMembers, events: "recovered, guarded", present: 4},
				{at: 4 * time.Second, answer: four[:1], changed: true, events: "absent b:1, absent c:1, absent d:1", present: 1,
					members: "a:1=10.0.0.1:1+initial b:1=10.0.0.2:1+absent+initial c:1=10.0.0.3:1+absent+initial d:1=10.0.0.4:1+absent+initial"},
			},
		},
		{
			name: "a different short answer restarts the count; a full one clears it",
			steps: []step{
				first,
				{at: 1 * time.Second, answer: four[:1], members: fourMembers, events: "guarded", present: 4},
				{at: 2 * time.Second, answer: four[1:2], members: fourMembers, events: "guarded", present: 4},
				{at: 3 * time.Second, answer: four[1:2], members: fourMembers, events: "guarded", present: 4},
				{at: 4 * time.Second, answer: four, members: fourMembers, present: 4},
				{at: 5 * time.Second, answer: four[1:2], members: fourMembers, events: "guarded", present: 4},
			},
		},
		{
			name: "exactly half is not a mass removal; less than half is",
			steps: []step{
				first,
				{at: time.Second, answer: four[:2], changed: true, events: "absent c:1, absent d:1", present: 2,
					members: "a:1=10.0.0.1:1+initial b:1=10.0.0.2:1+initial c:1=10.0.0.3:1+absent+initial d:1=10.0.0.4:1+absent+initial"},
				{at: 2 * time.Second, answer: nil, events: "guarded", present: 2,
					members: "a:1=10.0.0.1:1+initial b:1=10.0.0.2:1+initial c:1=10.0.0.3:1+absent+initial d:1=10.0.0.4:1+absent+initial"},
			},
		},
		{
			name: "an empty answer (NXDOMAIN) is a mass removal like any other",
			pol:  policy{removeAfter: time.Minute, confirm: 2},
			steps: []step{
				first,
				{at: time.Second, answer: nil, members: fourMembers, events: "guarded", present: 4},
				{at: 2 * time.Second, answer: nil, changed: true, events: "absent a:1, absent b:1, absent c:1, absent d:1", present: 0,
					members: "a:1=10.0.0.1:1+absent+initial b:1=10.0.0.2:1+absent+initial c:1=10.0.0.3:1+absent+initial d:1=10.0.0.4:1+absent+initial"},
				{at: 2*time.Second + time.Minute, answer: nil, changed: true, events: "removed a:1, removed b:1, removed c:1, removed d:1", present: 0},
				{at: 3 * time.Minute, answer: four[:1], changed: true, events: "added a:1", present: 1, members: "a:1=10.0.0.1:1"},
			},
		},
		{
			name: "confirm 1 applies a short answer at once",
			pol:  policy{removeAfter: time.Minute, confirm: 1},
			steps: []step{
				first,
				{at: time.Second, answer: four[:1], changed: true, events: "absent b:1, absent c:1, absent d:1", present: 1,
					members: "a:1=10.0.0.1:1+initial b:1=10.0.0.2:1+absent+initial c:1=10.0.0.3:1+absent+initial d:1=10.0.0.4:1+absent+initial"},
			},
		},
		{
			name: "before the first answer: no members; failures logged once per distinct error",
			steps: []step{
				{fail: "i/o timeout", events: "failed", present: 0},
				{at: 5 * time.Second, fail: "i/o timeout", present: 0},
				{at: 10 * time.Second, fail: "connection refused", events: "failed", present: 0},
				{at: 15 * time.Second, answer: four[:2], changed: true, events: "recovered, added a:1, added b:1", present: 2,
					members: "a:1=10.0.0.1:1+initial b:1=10.0.0.2:1+initial"},
			},
		},
		{
			name: "a first answer that is empty makes later members not initial",
			steps: []step{
				{answer: nil, present: 0},
				{at: 5 * time.Second, answer: four[:1], changed: true, events: "added a:1", present: 1, members: "a:1=10.0.0.1:1"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := tt.pol
			if pol.confirm == 0 {
				pol = policy{removeAfter: 5 * time.Minute, confirm: 3}
			}
			s := newSourceState(srvSource("_http._tcp.app.test"))
			for i, st := range tt.steps {
				now := t0.Add(st.at)
				var (
					changed bool
					events  []Event
				)
				if st.fail != "" {
					changed, events = s.fail(pol, errors.New(st.fail), now, nil)
				} else {
					changed, events = s.answer(pol, st.answer, now, nil)
				}
				ms, _ := mergeMembers([]*sourceState{s}, nil)
				if changed != st.changed {
					t.Errorf("step %d: changed = %v, want %v", i, changed, st.changed)
				}
				if got := showMembers(ms); got != st.members {
					t.Errorf("step %d: members\ngot  %s\nwant %s", i, got, st.members)
				}
				if got := showEvents(events); got != st.events {
					t.Errorf("step %d: events\ngot  %s\nwant %s", i, got, st.events)
				}
				status := s.status()
				if status.Members != st.present {
					t.Errorf("step %d: present = %d, want %d", i, status.Members, st.present)
				}
				if st.fail == "" && !status.LastSuccess.Equal(now) {
					t.Errorf("step %d: LastSuccess = %v, want %v", i, status.LastSuccess, now)
				}
				if (status.LastError != "") != (st.fail != "") {
					t.Errorf("step %d: LastError = %q after fail %q", i, status.LastError, st.fail)
				}
			}
		})
	}
}

// Counters: every failed query counts; only polls that changed the
// membership count as updates.
func TestMembershipCounters(t *testing.T) {
	pol := policy{removeAfter: time.Minute, confirm: 3}
	s := newSourceState(srvSource("x"))
	a := recs("a:1=10.0.0.1:1")
	s.answer(pol, a, t0, nil)
	s.answer(pol, a, t0.Add(time.Second), nil)
	s.fail(pol, errors.New("timeout"), t0.Add(2*time.Second), nil)
	s.fail(pol, errors.New("timeout"), t0.Add(3*time.Second), nil)
	s.answer(pol, recs("a:1=10.0.0.2:1"), t0.Add(4*time.Second), nil)
	st := s.status()
	if st.Updates != 2 || st.Errors != 2 {
		t.Errorf("Updates, Errors = %d, %d; want 2, 2", st.Updates, st.Errors)
	}
}

// Two sources discovering one name: the earlier source's member is kept
// and the conflict reported.
func TestMergeConflict(t *testing.T) {
	pol := policy{removeAfter: time.Minute, confirm: 3}
	s1, s2 := newSourceState(srvSource("one")), newSourceState(hostSource("two", 1))
	s1.answer(pol, recs("b:1=10.0.0.2:1", "x:1=10.0.0.1:1"), t0, nil)
	s2.answer(pol, recs("a:1=10.0.0.3:1", "x:1=10.0.0.9:1"), t0, nil)
	ms, events := mergeMembers([]*sourceState{s2, s1}, nil)
	if got, want := showMembers(ms), "a:1=10.0.0.3:1+initial b:1=10.0.0.2:1+initial x:1=10.0.0.9:1+initial"; got != want {
		t.Errorf("members\ngot  %s\nwant %s", got, want)
	}
	if len(events) != 1 || events[0].Kind != Conflict || events[0].Source != "one" || events[0].Name != "x:1" {
		t.Errorf("events = %+v, want one conflict for x:1 from source one", events)
	}
	for _, m := range ms {
		want := map[string]string{"a:1": "two", "b:1": "one", "x:1": "two"}[m.Name]
		if m.Source != want || m.Weight != 1 || m.Protocol != "http1" {
			t.Errorf("member %+v: want source %s, weight 1, protocol http1", m, want)
		}
	}
}

// An unchanged answer allocates nothing, however many members: no member
// list is rebuilt, no event made.
func TestUnchangedAnswerAllocatesNothing(t *testing.T) {
	pol := policy{removeAfter: time.Minute, confirm: 3}
	s := newSourceState(srvSource("x"))
	var answer []record
	for i := range 1000 {
		answer = append(answer, record{name: fmt.Sprintf("m-%04d:80", i), addr: fmt.Sprintf("10.0.%d.%d:80", i/256, i%256)})
	}
	s.answer(pol, answer, t0, nil)
	now := t0
	allocs := testing.AllocsPerRun(100, func() {
		now = now.Add(time.Second)
		if changed, events := s.answer(pol, answer, now, nil); changed || len(events) > 0 {
			t.Fatalf("unchanged answer: changed %v, events %v", changed, events)
		}
	})
	if allocs != 0 {
		t.Errorf("an unchanged answer of 1000 members allocates %v times, want 0", allocs)
	}
}

// Answer handling under arbitrary sequences: invariants that every rule
// keeps. Answers are drawn from a small name space so members come, go,
// return and change address.
func FuzzMembership(f *testing.F) {
	f.Add([]byte{0x0f, 0x03, 0x00, 0x0f, 0xff, 0x01}, uint8(3), uint8(2))
	f.Add([]byte{0xff, 0x00, 0x00, 0x00, 0x80, 0x7f}, uint8(1), uint8(0))
	f.Fuzz(func(t *testing.T, script []byte, confirm, removeAfter uint8) {
		pol := policy{removeAfter: time.Duration(removeAfter%8) * time.Second, confirm: 1 + int(confirm%5)}
		s := newSourceState(srvSource("x"))
		now := t0
		for _, b := range script {
			now = now.Add(time.Second)
			beforePresent := s.present
			before, _ := mergeMembers([]*sourceState{s}, nil)
			var (
				changed bool
				events  []Event
				answer  []record
			)
			if b == 0xff {
				changed, events = s.fail(pol, errors.New("timeout"), now, nil)
			} else {
				// Bits 0-5: which of six names are in the answer; bit 6: their
				// address; bit 7 unused noise.
				for i := range 6 {
					if b&(1<<i) != 0 {
						answer = append(answer, record{name: fmt.Sprintf("n%d:1", i), addr: fmt.Sprintf("10.0.%d.%d:1", b>>6&1, i)})
					}
				}
				changed, events = s.answer(pol, answer, now, nil)
			}
			after, _ := mergeMembers([]*sourceState{s}, nil)
			if changed != (showMembers(before) != showMembers(after)) {
				t.Fatalf("changed = %v but members went\n%s\nto\n%s", changed, showMembers(before), showMembers(after))
			}
			memberEvents, guarded := false, false
			for _, e := range events {
				switch e.Kind {
				case Added, Absent, Returned, Removed, Readdressed:
					memberEvents = true
				case Guarded:
					guarded = true
				}
			}
			if changed != memberEvents {
				t.Fatalf("changed = %v with events %s", changed, showEvents(events))
			}
			present := 0
			for _, m := range after {
				if !m.Absent {
					present++
				}
				if m.Absent && pol.removeAfter == 0 {
					t.Fatalf("absent member %s kept with remove_after 0", m.Name)
				}
			}
			if present != s.present {
				t.Fatalf("present count %d, members show %d", s.present, present)
			}
			if b != 0xff {
				if guarded && !(2*len(answer) < beforePresent) {
					t.Fatalf("answer of %d guarded with %d present", len(answer), beforePresent)
				}
				if !guarded {
					// Applied: exactly the answer's names are present, at its addresses.
					var want []string
					for _, r := range answer {
						want = append(want, r.name+"="+r.addr)
					}
					var got []string
					for _, m := range after {
						if !m.Absent {
							got = append(got, m.Name+"="+strings.TrimPrefix(m.URL, "http://"))
						}
					}
					if strings.Join(got, " ") != strings.Join(want, " ") {
						t.Fatalf("applied answer %v, present members %v", want, got)
					}
				} else if pol.confirm == 1 {
					t.Fatalf("answer guarded with confirm 1")
				}
			}
		}
	})
}
