package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/balancer/options"
)

// Scenario is one way of routing the workload.
type Scenario struct {
	Name string
	// Proxy is "round-robin", "least-connections" (the bench's own tiny
	// proxies) or "ringlb".
	Proxy string
	// For ringlb: the key sources, the bounded-load factor and floor,
	// and hold.
	Keys       []key.Source
	LoadFactor float64
	LoadFloor  int
	Hold       bool
	// ScaleOut adds a fifth server halfway through (a reload of ringlb's
	// upstreams).
	ScaleOut bool
}

// Result is what a scenario's run measured.
type Result struct {
	Scenario
	Requests, Failed int
	HitRate          float64
	TTFT50, TTFT99   time.Duration
	Throughput       float64 // requests per second
	TokensPerSecond  float64
	BusiestOverMean  float64 // the busiest server's requests over the mean
	// Moved is the share of turns after a conversation's first that went
	// to another server than the turn before: each found its
	// conversation's cache elsewhere.
	Moved float64
	// Spanning counts the conversations across the scale-out; Lost those
	// whose next turn went to the new server (their cache stayed behind
	// because the ring changed), Spilled those whose next turn went to
	// another old one (bounded loads: their server was full).
	Spanning, Lost, Spilled int
	PerServer               map[string]int
	Elapsed, ScaledAt       time.Duration
}

// Sim is the whole set-up: the servers' hardware and the workload.
type Sim struct {
	Servers  int // before the scale-out
	Server   ServerConfig
	Workload Workload
}

// serve starts h on a loopback port and returns its URL.
func serve(h http.Handler) (string, func()) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return "http://" + ln.Addr().String(), func() { srv.Close() }
}

// Run plays the workload through one scenario, on fresh servers.
func (sim Sim) Run(sc Scenario) (Result, error) {
	n := sim.Servers
	if sc.ScaleOut {
		n++
	}
	servers := make([]*Server, n)
	urls := make([]*url.URL, n)
	for i := range servers {
		servers[i] = NewServer(fmt.Sprintf("gpu-%d", i+1), sim.Server)
		u, stop := serve(servers[i])
		defer stop()
		urls[i], _ = url.Parse(u)
	}
	front, scale, stop, err := frontFor(sc, servers[:sim.Servers], urls[:sim.Servers], urls)
	if err != nil {
		return Result{}, err
	}
	defer stop()
	tr := &http.Transport{MaxIdleConnsPerHost: 1024, MaxConnsPerHost: 0, IdleConnTimeout: 90 * time.Second}
	defer tr.CloseIdleConnections()
	c := &client{url: front, http: &http.Client{Transport: tr}, model: "sim-8b", header: "X-Session"}
	var at func()
	var scaledAt time.Duration
	begin := time.Now()
	if sc.ScaleOut {
		at = func() {
			scaledAt = time.Since(begin)
			if err := scale(); err != nil {
				panic(err)
			}
		}
	}
	turns := sim.Workload.run(context.Background(), c, at)
	return summarize(sc, turns, time.Since(begin), scaledAt), nil
}

// frontFor starts the scenario's front end before the first n servers
// (urls[:n]); scale, for a scale-out, puts all of all in.
func frontFor(sc Scenario, servers []*Server, first, all []*url.URL) (front string, scale func() error, stop func(), err error) {
	switch sc.Proxy {
	case "round-robin", "least-connections":
		p := newTinyProxy(sc.Proxy, first)
		u, stop := serve(p)
		return u, func() error { p.set(all); return nil }, stop, nil
	case "ringlb":
		opts := ringlbOptions(sc, first)
		b, err := balancer.New(opts, metrics.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			return "", nil, nil, err
		}
		u, stopFront := serve(b)
		scale := func() error {
			_, err := b.Update(ringlbOptions(sc, all))
			return err
		}
		return u, scale, func() { stopFront(); b.Close() }, nil
	}
	return "", nil, nil, fmt.Errorf("unknown proxy %q", sc.Proxy)
}

// ringlbOptions is the Balancer a config file like
// examples/configs/llm.yaml gives, before the upstreams us.
func ringlbOptions(sc Scenario, us []*url.URL) balancer.Options {
	opts := balancer.Options{PoolOptions: balancer.PoolOptions{
		Ring: options.Ring{PointsPerWeight: 160, LoadFactor: sc.LoadFactor, LoadFloor: sc.LoadFloor},
		Hash: options.Hash{Key: sc.Keys, OnMissing: options.OnMissingRandom, BodyLimit: 256 << 10},
		// The servers say who they are (X-Server); ringlb's header
		// would say the same.
		Retries:  1,
		Timeouts: options.Timeouts{Dial: 2 * time.Second, ResponseHeader: 120 * time.Second, Read: 60 * time.Second, IdleConn: 90 * time.Second},
	}}
	if sc.Hold {
		opts.Hold = hold.Options{Idle: 30 * time.Minute, MaxKeys: 1 << 20}
	}
	for i, u := range us {
		opts.Upstreams = append(opts.Upstreams, options.Upstream{Name: fmt.Sprintf("gpu-%d", i+1), URL: u, Addr: u.Host, Weight: 1})
	}
	return opts
}

// tinyProxy is round robin or least connections over httputil's
// ReverseProxy: what a plain load balancer does.
type tinyProxy struct {
	mode    string
	mu      sync.Mutex
	targets []*target
	next    atomic.Uint64
	rng     *rand.Rand
}

type target struct {
	rp       *httputil.ReverseProxy
	inflight int
}

func newTinyProxy(mode string, us []*url.URL) *tinyProxy {
	p := &tinyProxy{mode: mode, rng: rand.New(rand.NewSource(1))}
	p.set(us)
	return p
}

func (p *tinyProxy) set(us []*url.URL) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, u := range us[len(p.targets):] {
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.Transport = &http.Transport{MaxIdleConnsPerHost: 1024, IdleConnTimeout: 90 * time.Second}
		rp.ErrorLog = nil
		p.targets = append(p.targets, &target{rp: rp})
	}
}

func (p *tinyProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	var t *target
	if p.mode == "round-robin" {
		t = p.targets[p.next.Add(1)%uint64(len(p.targets))]
	} else {
		// Least connections, ties broken at random (as nginx's
		// least_conn breaks them by weighted round robin).
		best := math.MaxInt
		ties := 0
		for _, c := range p.targets {
			switch {
			case c.inflight < best:
				best, t, ties = c.inflight, c, 1
			case c.inflight == best:
				ties++
				if p.rng.Intn(ties) == 0 {
					t = c
				}
			}
		}
	}
	t.inflight++
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		t.inflight--
		p.mu.Unlock()
	}()
	t.rp.ServeHTTP(w, r)
}

// summarize measures a run from its turns.
func summarize(sc Scenario, turns []Turn, elapsed, scaledAt time.Duration) Result {
	res := Result{Scenario: sc, Elapsed: elapsed, ScaledAt: scaledAt, PerServer: map[string]int{}}
	var ttfts []time.Duration
	var prompt, hit, tokens int
	first, last := time.Duration(math.MaxInt64), time.Duration(0)
	for _, t := range turns {
		if t.Err != "" {
			res.Failed++
			continue
		}
		res.Requests++
		ttfts = append(ttfts, t.TTFT)
		prompt += t.Prompt
		hit += t.Hit
		tokens += t.Tokens
		res.PerServer[t.Server]++
		first = min(first, t.Start)
		last = max(last, t.Start+t.Total)
	}
	if res.Requests == 0 {
		return res
	}
	slices.Sort(ttfts)
	res.TTFT50 = ttfts[len(ttfts)/2]
	res.TTFT99 = ttfts[min(len(ttfts)-1, len(ttfts)*99/100)]
	res.HitRate = float64(hit) / float64(prompt)
	span := (last - first).Seconds()
	res.Throughput = float64(res.Requests) / span
	res.TokensPerSecond = float64(tokens) / span
	// The load: requests per server, over the servers that were there
	// the whole run (a scale-out's fifth started late).
	var counts []int
	for s, n := range res.PerServer {
		if sc.ScaleOut && s == "gpu-5" {
			continue
		}
		counts = append(counts, n)
	}
	sum, most := 0, 0
	for _, n := range counts {
		sum += n
		most = max(most, n)
	}
	res.BusiestOverMean = float64(most) / (float64(sum) / float64(len(counts)))
	res.Moved = moved(turns)
	if sc.ScaleOut {
		res.Spanning, res.Lost, res.Spilled = lostAtScaleOut(turns, scaledAt, "gpu-5")
	}
	return res
}

// moved is the share of turns, after the first of each conversation,
// that went to another server than the turn before.
func moved(turns []Turn) float64 {
	last := map[int]Turn{}
	sorted := slices.Clone(turns)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Start < sorted[j].Start })
	n, m := 0, 0
	for _, t := range sorted {
		if t.Err != "" {
			continue
		}
		if prev, ok := last[t.Conv]; ok {
			n++
			if prev.Server != t.Server {
				m++
			}
		}
		last[t.Conv] = t
	}
	if n == 0 {
		return 0
	}
	return float64(m) / float64(n)
}

// lostAtScaleOut counts the conversations with a turn before the
// scale-out and one after it (spanning), those whose first turn after
// it went to the new server (lost: the ring moved them, their cache
// stayed behind) and those whose first turn after it went to another
// old server (spilled: a full server's overflow, as at any other time).
func lostAtScaleOut(turns []Turn, at time.Duration, added string) (spanning, lost, spilled int) {
	byConv := map[int][]Turn{}
	for _, t := range turns {
		if t.Err == "" {
			byConv[t.Conv] = append(byConv[t.Conv], t)
		}
	}
	for _, ts := range byConv {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Turn < ts[j].Turn })
		for i := 1; i < len(ts); i++ {
			if ts[i-1].Start < at && ts[i].Start >= at {
				spanning++
				switch {
				case ts[i].Server == ts[i-1].Server:
				case ts[i].Server == added:
					lost++
				default:
					spilled++
				}
				break
			}
		}
	}
	return spanning, lost, spilled
}
