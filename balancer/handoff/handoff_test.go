package handoff

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/ringlb/ringlb/ring"
)

func TestSFEscape(t *testing.T) {
	for in, want := range map[string]string{
		"app-1":                 "app-1",
		`a"b`:                   `a\"b`,
		`a\b`:                   `a\\b`,
		`http://h:1/"x"\y`:      `http://h:1/\"x\"\\y`,
		"":                      "",
		"http://10.0.0.1:8080/": "http://10.0.0.1:8080/",
	} {
		if got := sfEscape(in); got != want {
			t.Errorf("sfEscape(%q) = %q, want %q", in, got, want)
		}
	}
}

// usable is a Members where every member is usable and none drains.
type usable map[string]int

func (u usable) Held(name string) int {
	if i, ok := u[name]; ok {
		return i
	}
	return -1
}
func (usable) Usable(int) bool   { return true }
func (usable) Draining(int) bool { return false }

// After a scale-out, within the window, a moved key names the member the
// previous ring gave it, and a held key its record's upstream; the header
// goes only to another member than the one named, and past the window
// nothing is named.
func TestFromAndAttempt(t *testing.T) {
	mk := func(names ...string) *ring.Ring {
		var ms []ring.Member
		for _, n := range names {
			ms = append(ms, ring.Member{Name: n, Weight: 1})
		}
		r, err := ring.New(ms, ring.Options{PointsPerWeight: 160})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	before, after := mk("a", "b", "c"), mk("a", "b", "c", "d")
	urls := []string{"http://a", "http://b", "http://c", "http://d"}
	o := Options{Header: "ringlb-handoff", Window: time.Minute}
	if New(Options{}, after, urls, before, nil, 0) != nil {
		t.Fatal("no header: handoff should be off")
	}
	st := New(o, after, urls, before, nil, 0)
	m := usable{"a": 0, "b": 1, "c": 2, "d": 3}
	moved := 0
	for i := range 200 {
		h := after.Hash(fmt.Sprint("k", i))
		p := st.From("", h, 1, m)
		if was := before.Owner(h); after.Owner(h) != was {
			moved++
			if p != was {
				t.Fatalf("moved key: From = %d, want the previous owner %d", p, was)
			}
		}
		if got := st.From("", h, int64(time.Minute), m); got != -1 {
			t.Fatalf("past the window: From = %d, want -1", got)
		}
		if got := st.From("c", h, int64(time.Minute), m); got != 2 {
			t.Fatalf("held on c: From = %d, want 2", got)
		}
	}
	if moved == 0 {
		t.Fatal("the scale-out moved no key")
	}
	r, _ := http.NewRequest(http.MethodGet, "http://x/", nil)
	r.Header.Set("Ringlb-Handoff", "forged")
	if st.Attempt(r, 1, 1) || r.Header.Get("Ringlb-Handoff") != "" {
		t.Errorf("to the member named: header %q, want none", r.Header.Get("Ringlb-Handoff"))
	}
	if !st.Attempt(r, 1, 3) || r.Header.Get("Ringlb-Handoff") != `name="b", url="http://b"` {
		t.Errorf("to another member: header %q", r.Header.Get("Ringlb-Handoff"))
	}
}
