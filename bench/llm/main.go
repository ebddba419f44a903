// Command llm simulates LLM inference traffic through ringlb and through
// plain load balancers: fake OpenAI-compatible model servers with a
// prefix KV cache of fixed size, and multi-turn conversations under a
// few shared system prompts. It reports, for each way of routing, the
// servers' prefix-cache hit rate, the time to first token, the
// throughput, the balance, and the conversations whose cache stayed
// behind when a server was added.
//
//	go run ./bench/llm                         # the full run, about 6 minutes
//	go run ./bench/llm -out bench/RESULTS-llm.md
//	go run ./bench/llm -duration 8s -only prefix   # a quick look at some rows
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/ringlb/ringlb/balancer/key"
)

// DefaultSim is the simulation the results are made with; see the
// README of this directory for why each number is what it is.
func DefaultSim() Sim {
	return Sim{
		Servers: 4,
		Server: ServerConfig{
			Slots:       4,
			CacheBlocks: 512, // 128 KiB of prompt: a server's share of the conversations in flight, not all of them
			BlockBytes:  256,
			Base:        10 * time.Millisecond,
			PerByte:     25 * time.Microsecond, // 10 KiB uncached: 256 ms of prefill
			PerToken:    4 * time.Millisecond,
		},
		Workload: Workload{
			Rate:          6,
			Duration:      16 * time.Second,
			Turns:         8,
			Think:         time.Second,
			SystemPrompts: 8,
			SystemBytes:   1024,
			Zipf:          1.2,
			UserBytes:     [2]int{800, 1600},
			MaxTokens:     40,
			Seed:          7,
		},
	}
}

// Scenarios are the ways of routing compared, in the report's order.
func Scenarios() []Scenario {
	prefix := []key.Source{{Kind: key.Prefix, Bytes: 8192}}
	// Bounded loads: load_factor 1.25, and load_floor the servers' slots
	// (a server counts as full once its slots are taken, not before).
	const c, floor = 1.25, 4
	return []Scenario{
		{Name: "round-robin", Proxy: "round-robin"},
		{Name: "least-connections", Proxy: "least-connections"},
		{Name: "ringlb, session header", Proxy: "ringlb", Keys: []key.Source{{Kind: key.Header, Name: "X-Session"}}},
		{Name: "ringlb, prefix", Proxy: "ringlb", Keys: prefix},
		{Name: "ringlb, prefix 256 bytes + bounded loads", Proxy: "ringlb", Keys: []key.Source{{Kind: key.Prefix, Bytes: 256}}, LoadFactor: c, LoadFloor: floor},
		{Name: "ringlb, prefix + bounded loads", Proxy: "ringlb", Keys: prefix, LoadFactor: c, LoadFloor: floor},
		{Name: "ringlb, prefix + bounded loads, load_floor 8", Proxy: "ringlb", Keys: prefix, LoadFactor: c, LoadFloor: 8},
		{Name: "ringlb, prefix, 4→5 servers", Proxy: "ringlb", Keys: prefix, ScaleOut: true},
		{Name: "ringlb, prefix + hold, 4→5 servers", Proxy: "ringlb", Keys: prefix, Hold: true, ScaleOut: true},
		{Name: "ringlb, prefix + bounded loads + hold, 4→5 servers", Proxy: "ringlb", Keys: prefix, LoadFactor: c, LoadFloor: floor, Hold: true, ScaleOut: true},
	}
}

func main() {
	out := flag.String("out", "", "write the report (Markdown) to this file too")
	duration := flag.Duration("duration", 0, "how long new conversations start (default: the simulation's, 16s)")
	only := flag.String("only", "", "run only the scenarios whose name matches this regular expression")
	flag.Parse()
	sim := DefaultSim()
	if *duration > 0 {
		sim.Workload.Duration = *duration
	}
	var results []Result
	for _, sc := range Scenarios() {
		if *only != "" && !regexp.MustCompile(*only).MatchString(sc.Name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "== %s\n", sc.Name)
		res, err := sim.Run(sc)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "   %s\n", res.Line())
		results = append(results, res)
	}
	var w io.Writer = os.Stdout
	if *out != "" {
		f, err := os.Create(*out)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	report(w, sim, results, strings.Join(os.Args[1:], " "))
}

// Line is a result in one line, for the progress output.
func (r Result) Line() string {
	s := fmt.Sprintf("%d requests (%d failed), hit rate %.1f%%, TTFT p50 %v p99 %v, %.1f req/s, busiest/mean %.2f, %.1f%% of turns moved",
		r.Requests, r.Failed, 100*r.HitRate, r.TTFT50.Round(time.Millisecond), r.TTFT99.Round(time.Millisecond), r.Throughput, r.BusiestOverMean, 100*r.Moved)
	if r.ScaleOut {
		s += fmt.Sprintf(", of %d conversations across the scale-out %d went to the new server, %d spilled to another", r.Spanning, r.Lost, r.Spilled)
	}
	return s
}

// report writes the results as Markdown.
func report(w io.Writer, sim Sim, results []Result, args string) {
	cmd := "go run ./bench/llm"
	if args != "" {
		cmd += " " + args
	}
	fmt.Fprintf(w, "# LLM routing simulation\n\n")
	fmt.Fprintf(w, "Made by `%s` on %s (%d CPUs, Go %s), %s.\n\n", cmd, time.Now().UTC().Format("2006-01-02"), runtime.NumCPU(), runtime.Version(), loadNote())
	s, wl := sim.Server, sim.Workload
	fmt.Fprintf(w, "%d fake model servers (bench/llm/server.go), each with %d slots and a KV cache of %d blocks of %d bytes (%d KiB of prompt, LRU); "+
		"TTFT = %v + %v per uncached prompt byte, after the wait for a slot; %v per output token. "+
		"Workload: %.0f conversations a second for %v, %d turns each, %v apart; %d system prompts of %d bytes, Zipf s = %.1f; "+
		"user messages of %d-%d bytes; %d tokens per answer, streamed.\n\n",
		sim.Servers, s.Slots, s.CacheBlocks, s.BlockBytes, s.CacheBlocks*s.BlockBytes>>10, s.Base, s.PerByte, s.PerToken,
		wl.Rate, wl.Duration, wl.Turns, wl.Think, wl.SystemPrompts, wl.SystemBytes, wl.Zipf, wl.UserBytes[0], wl.UserBytes[1], wl.MaxTokens)
	fmt.Fprintf(w, "| routing | requests | cache hit rate | TTFT p50 | TTFT p99 | throughput (req/s) | tokens/s | busiest/mean | turns moved | lost at the scale-out (spilled) |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range results {
		lost := "-"
		if r.ScaleOut {
			lost = fmt.Sprintf("%d of %d (%d)", r.Lost, r.Spanning, r.Spilled)
		}
		fmt.Fprintf(w, "| %s | %d | %.1f%% | %v | %v | %.1f | %.0f | %.2f | %.1f%% | %s |\n", r.Name, r.Requests, 100*r.HitRate,
			r.TTFT50.Round(time.Millisecond), r.TTFT99.Round(time.Millisecond), r.Throughput, r.TokensPerSecond, r.BusiestOverMean, 100*r.Moved, lost)
	}
	fmt.Fprint(w, `
- cache hit rate: prompt bytes the server found in its KV cache over all
  prompt bytes (vLLM's prefix_cache_hits over prefix_cache_queries).
- TTFT: from the request to the first token, as the client saw it
  (the wait for a slot included).
- throughput: requests over the time from the first request to the last
  answer; the arrivals are the same in every row, so it moves little.
- busiest/mean: the requests of the busiest server (of those there from
  the start) over the mean.
- turns moved: turns after a conversation's first that went to another
  server than the turn before (and found its cache elsewhere).
- lost at the scale-out: of the conversations with turns before and
  after the fifth server came, those whose next turn went to it; in
  brackets, those whose next turn went to another old server (a full
  server's overflow, as at any other time; with bounded loads an
  overflow may also land on the new server, counted as lost).
`)
	fmt.Fprintln(w)
}

// loadNote says how busy the machine was, from /proc/loadavg.
func loadNote() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "load unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "load unknown"
	}
	return "load average " + strings.Join(f[:3], " ") + " at the end"
}
