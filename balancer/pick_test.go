package balancer

import (
	"io"
	"math"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ringlb/ringlb/ring"
)

// holdSameKey sends n requests for one key through front, one after the
// other, each held by its upstream until the test ends, and returns how
// many each upstream holds once all n are in flight.
func holdSameKey(t *testing.T, bes []*backend, opts Options, key string, n int) (holders map[string]int, b *Balancer, overflow func(string) float64) {
	t.Helper()
	arrived := make(chan string, n)
	release := make(chan struct{})
	for _, be := range bes {
		be.handle = func(w http.ResponseWriter, r *http.Request) {
			arrived <- be.name
			<-release
			io.WriteString(w, be.name)
		}
	}
	b, reg, front := proxy(t, opts)
	c := front.Client()
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(release)
		wg.Wait()
	})
	holders = map[string]int{}
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Get(front.URL + "/?user=" + key)
			if err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
		select {
		case name := <-arrived:
			holders[name]++
		case <-time.After(10 * time.Second):
			t.Fatal("a held request never reached an upstream")
		}
	}
	return holders, b, func(name string) float64 { return metric(t, reg, "ringlb_overflow_total", "upstream="+name) }
}

func fourBackends(t *testing.T) []*backend {
	return []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"), newBackend(t, "d")}
}

// A quiet fleet with bounded loads on keeps a handful of one user's
// concurrent requests on the user's owner: the floor, not the
// proportional cap (1 with nothing else in flight), decides. With the
// floor at 1 the same requests split, as they did before the floor.
func TestLoadFloorKeepsQuietFleetTogether(t *testing.T) {
	const n = 6 // a page's parallel requests
	for _, tc := range []struct {
		name  string
		floor int
		split bool
	}{{"floor 8", 8, false}, {"floor 1", 1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			bes := fourBackends(t)
			opts := baseOptions(upstreamsOf(t, bes...))
			opts.Ring.LoadFactor, opts.Ring.LoadFloor = 1.25, tc.floor
			holders, b, overflow := holdSameKey(t, bes, opts, "u42", n)
			owner := b.Lookup("u42").Owner
			if got := holders[owner] < n; got != tc.split {
				t.Errorf("%d concurrent requests for one key held %v (owner %s); split = %v, want %v", n, holders, owner, got, tc.split)
			}
			if v := overflow(owner); (v > 0) != tc.split || v != float64(n-holders[owner]) {
				t.Errorf("ringlb_overflow_total{%s} = %v with holders %v", owner, v, holders)
			}
		})
	}
}

// A burst well above the floor still overflows: the owner takes requests
// exactly while it holds fewer than max(ceil(c × (in-flight + 1) × w / W),
// floor), and every other request is sent past it.
func TestLoadFloorBurstStillOverflows(t *testing.T) {
	const (
		n     = 40
		c     = 1.25
		floor = 8
	)
	bes := fourBackends(t)
	opts := baseOptions(upstreamsOf(t, bes...))
	opts.Ring.LoadFactor, opts.Ring.LoadFloor = c, floor
	holders, b, overflow := holdSameKey(t, bes, opts, "hot", n)
	owner := b.Lookup("hot").Owner

	// The rule, replayed: the k-th request sees k-1 in flight.
	want := 0
	for k := 1; k <= n; k++ {
		if limit := max(int(math.Ceil(c*float64(k)*1/4)), floor); want < limit {
			want++
		}
	}
	if holders[owner] != want {
		t.Errorf("owner %s holds %d of %d concurrent requests, want %d (holders %v)", owner, holders[owner], n, want, holders)
	}
	if want >= n || want <= floor {
		t.Fatalf("test setup: the owner should hold more than the floor and less than all, got %d", want)
	}
	if v := overflow(owner); v != float64(n-want) {
		t.Errorf("ringlb_overflow_total{%s} = %v, want %d", owner, v, n-want)
	}
	if lk := b.Lookup("hot"); lk.Chosen == owner || len(lk.Skipped) == 0 || lk.Skipped[0].Reason != ring.Full {
		t.Errorf("lookup while the owner is full: %+v", lk)
	}
}

func TestBoundedLoadsSpreadHotKey(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	arrived := make(chan string, 4)
	release := make(chan struct{})
	for _, be := range bes {
		be.handle = func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("block") == "1" {
				arrived <- be.name
				<-release
			}
			io.WriteString(w, be.name)
		}
	}
	b, reg, front := proxy(t, baseOptions(upstreamsOf(t, bes...)))
	owner := b.Lookup("hot").Owner
	c := front.Client()

	// Hold three slow requests for the hot key. With c = 1.25 and three
	// equal upstreams the owner's cap is ceil(1.25 × (in-flight+1) / 3):
	// the first goes to the owner (cap 1), the second overflows (cap 1),
	// the third fits on the owner again (cap 2), and with three in flight
	// the cap is 2, which the owner holds.
	var wg sync.WaitGroup
	holders := map[string]int{}
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Get(front.URL + "/?block=1&user=hot")
			if err == nil {
				io.Copy(io.Discard, res.Body)
				res.Body.Close()
			}
		}()
		select {
		case name := <-arrived:
			holders[name]++
		case <-time.After(10 * time.Second):
			t.Fatal("slow request never arrived")
		}
	}
	if holders[owner] != 2 || len(holders) != 2 {
		t.Errorf("slow requests held by %v; owner is %s", holders, owner)
	}
	// The owner is full: the next request for the key goes elsewhere.
	_, got, _ := get(t, c, front.URL+"/?user=hot")
	if got == owner {
		t.Errorf("hot key went to its full owner %s", owner)
	}
	if lk := b.Lookup("hot"); lk.Chosen == owner || len(lk.Skipped) == 0 || lk.Skipped[0].Name != owner || lk.Skipped[0].Reason != ring.Full {
		t.Errorf("lookup while full: %+v", lk)
	}
	close(release)
	wg.Wait()
	if v := metric(t, reg, "ringlb_overflow_total", "upstream="+owner); v != 2 {
		t.Errorf("ringlb_overflow_total{%s} = %v, want 2", owner, v)
	}
	if _, got, _ := get(t, c, front.URL+"/?user=hot"); got != owner {
		t.Errorf("after release the hot key went to %s, not its owner %s", got, owner)
	}
}

func TestPickDoesNotAllocate(t *testing.T) {
	ups := upstreamsOf(t, newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c"))
	opts := baseOptions(ups)
	opts.Ring.SlowStart = time.Minute
	b, err := New(opts, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := b.snap.Load()
	h := s.ring.Hash("user-1")
	tried := []int{1}
	if n := testing.AllocsPerRun(1000, func() { b.pick(s, h, tried, nil) }); n != 0 {
		t.Errorf("pick allocates %v times", n)
	}
}
