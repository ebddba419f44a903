package ring

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// testKeys returns n distinct, realistic keys (12-40 bytes), the same on
// every run: half look like session keys, half are random printable
// strings from a fixed seed.
func testKeys(n int) []string {
	rng := rand.New(rand.NewPCG(1, 2))
	const printable = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@"
	keys := make([]string, n)
	buf := make([]byte, 0, 40)
	for i := range keys {
		if i%2 == 0 {
			keys[i] = fmt.Sprintf("user-%d-session-%08x", i, rng.Uint32())
			continue
		}
		l := 12 + rng.IntN(29-8) // 12..32, plus the suffix below
		buf = buf[:0]
		for range l {
			buf = append(buf, printable[rng.IntN(len(printable))])
		}
		buf = fmt.Appendf(buf, "~%d", i) // keeps keys distinct
		keys[i] = string(buf)
	}
	return keys
}

// equalMembers returns n members "up-0" ... of weight 1.
func equalMembers(n int) []Member {
	ms := make([]Member, n)
	for i := range ms {
		ms[i] = Member{Name: fmt.Sprintf("up-%d", i), Weight: 1}
	}
	return ms
}

func mustNew(t testing.TB, ms []Member, opt Options) *Ring {
	t.Helper()
	r, err := New(ms, opt)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// ownerNames maps every key to the name of its owner.
func ownerNames(r *Ring, keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = r.Members()[r.Owner(r.Hash(k))].Name
	}
	return out
}

// naiveSearch is the reference lookup: a linear scan of the sorted points
// for the first at or after h, wrapping to the first point.
func naiveSearch(r *Ring, h uint64) int {
	for i, p := range r.pts[:r.n] {
		if p.pos >= h {
			return i
		}
	}
	return 0
}

// naivePreference walks the points from h and lists each member once.
func naivePreference(r *Ring, h uint64) []int {
	start := naiveSearch(r, h)
	seen := map[int]bool{}
	var out []int
	for k := range r.n {
		m := int(r.pts[(start+k)%r.n].member)
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	return out
}
