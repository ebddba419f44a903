// Command rate is bench/run.sh's constant-rate load generator: requests at
// a fixed rate, whatever the server does, with latency counted so that a
// stall shows in the tail instead of hiding from it (no coordinated
// omission), in the manner of wrk2.
//
// It opens -conns keep-alive HTTP/1.1 connections. Connection c of C sends
// its k-th request at start + (k*C + c)/rate: the connections interleave,
// and together they send -rate requests a second. When a response comes
// back after its connection's next request was due, that request goes out
// at once and its latency is counted from when it was due, not from when
// it could be sent: a server that stalls for 100 ms is charged for every
// request that should have gone out meanwhile, as an open-loop client
// population would see it. When the connection was free at the due time,
// the latency is counted from when the request was actually written, so
// the generator's own timer lateness (Go's timers can fire up to a
// millisecond late when the process is idle) is not charged to the
// server; how late the generator was in sending those is reported apart
// (lag: over the requests whose connection was free when they were due).
//
// Paths are /k/<n> over -paths distinct n, walked with the same stride as
// bench/paths.lua. With -cookie NAME=V0,V1,..., request /k/<n> carries the
// cookie NAME=V(n mod the number of values), as bench/sticky.lua sends it:
// the path's upstream named by a proxy's sticky cookie. Only what bench/upstream and the proxies in front of it
// answer is parsed: a status line, headers, and a Content-Length or
// chunked body.
//
// Output, one line on stdout:
//
//	rate=R duration_s=D sent=N done=N errors=E achieved=R' p50_us=.. p90_us=.. p99_us=.. p999_us=.. max_us=.. lag_p99_us=.. lag_max_us=..
//
//	go run ./bench/rate -url http://127.0.0.1:19180 -rate 5000 -duration 10s
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	target := flag.String("url", "", "server to load, http://host:port")
	rate := flag.Float64("rate", 1000, "requests per second, all connections together")
	dur := flag.Duration("duration", 10*time.Second, "how long to send")
	conns := flag.Int("conns", 64, "keep-alive connections")
	paths := flag.Int("paths", 100000, "distinct paths /k/<n>")
	cookie := flag.String("cookie", "", "NAME=V0,V1,...: /k/<n> carries the cookie NAME=V(n mod the number of values)")
	flag.Parse()
	u, err := url.Parse(*target)
	if err != nil || u.Scheme != "http" || u.Host == "" || *rate <= 0 || *conns < 1 || *paths < 1 || *dur <= 0 {
		fmt.Fprintln(os.Stderr, "rate: need -url http://host:port, -rate > 0, -conns >= 1, -paths >= 1, -duration > 0")
		os.Exit(2)
	}
	cookies, err := cookieHeaders(*cookie)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rate:", err)
		os.Exit(2)
	}
	stride := 7919 // as bench/paths.lua
	if gcd(*paths, stride) != 1 {
		stride = 1
	}
	var next atomic.Int64
	pathOf := func() int { return int((next.Add(1) * int64(stride)) % int64(*paths)) }

	interval := time.Duration(float64(time.Second) * float64(*conns) / *rate)
	start := time.Now().Add(100 * time.Millisecond) // every connection dialled first
	end := start.Add(*dur)
	results := make([]*connResult, *conns)
	var wg sync.WaitGroup
	for c := range *conns {
		r := &connResult{}
		results[c] = r
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := start.Add(time.Duration(float64(time.Second) * float64(c) / *rate))
			r.run(u.Host, first, interval, end, pathOf, cookies)
		}()
	}
	wg.Wait()

	var lat, lag []int32
	var sent, done, errs int
	for _, r := range results {
		lat = append(lat, r.lat...)
		lag = append(lag, r.lag...)
		sent += r.sent
		done += len(r.lat)
		errs += r.errs
	}
	slices.Sort(lat)
	slices.Sort(lag)
	fmt.Printf("rate=%.0f duration_s=%.1f sent=%d done=%d errors=%d achieved=%.0f p50_us=%d p90_us=%d p99_us=%d p999_us=%d max_us=%d lag_p99_us=%d lag_max_us=%d\n",
		*rate, dur.Seconds(), sent, done, errs, float64(done)/dur.Seconds(),
		pct(lat, 0.50), pct(lat, 0.90), pct(lat, 0.99), pct(lat, 0.999), pct(lat, 1), pct(lag, 0.99), pct(lag, 1))
}

// connResult is one connection's record: latencies and send lags in µs.
type connResult struct {
	lat, lag   []int32
	sent, errs int
}

// run sends on one connection, its requests due at first, first+interval,
// ... until end.
func (r *connResult) run(host string, first time.Time, interval time.Duration, end time.Time, pathOf func() int, cookies []string) {
	var c net.Conn
	var br *bufio.Reader
	buf := make([]byte, 0, 256)
	prevDone := time.Time{}
	for due := first; due.Before(end); due = due.Add(interval) {
		if c == nil {
			var err error
			if c, err = net.DialTimeout("tcp", host, 5*time.Second); err != nil {
				r.errs++
				time.Sleep(10 * time.Millisecond)
				continue
			}
			br = bufio.NewReaderSize(c, 16<<10)
		}
		if d := time.Until(due); d > 0 {
			time.Sleep(d)
		}
		n := pathOf()
		buf = append(buf[:0], "GET /k/"...)
		buf = strconv.AppendInt(buf, int64(n), 10)
		buf = append(buf, " HTTP/1.1\r\nHost: "...)
		buf = append(buf, host...)
		if len(cookies) > 0 {
			buf = append(buf, cookies[n%len(cookies)]...)
		}
		buf = append(buf, "\r\n\r\n"...)
		sentAt := time.Now()
		from := sentAt // connection free when due: the generator's lateness is its own
		if prevDone.After(due) {
			from = due // the server kept this connection busy past the due time: charge it
		}
		r.sent++
		if from == sentAt { // how late the generator itself was
			r.lag = append(r.lag, int32(min(sentAt.Sub(due).Microseconds(), 1<<31-1)))
		}
		_ = c.SetDeadline(sentAt.Add(30 * time.Second))
		_, err := c.Write(buf)
		var keep bool
		if err == nil {
			keep, err = readResponse(br)
		}
		prevDone = time.Now()
		if err != nil {
			r.errs++
			c.Close()
			c = nil
			continue
		}
		r.lat = append(r.lat, int32(min(prevDone.Sub(from).Microseconds(), 1<<31-1)))
		if !keep {
			c.Close()
			c = nil
		}
	}
	if c != nil {
		c.Close()
	}
}

// cookieHeaders turns -cookie NAME=V0,V1,... into one header line per
// value ("\r\nCookie: NAME=Vi"); none for "".
func cookieHeaders(spec string) ([]string, error) {
	if spec == "" {
		return nil, nil
	}
	name, values, ok := strings.Cut(spec, "=")
	if !ok || name == "" || values == "" {
		return nil, fmt.Errorf("-cookie %q: want NAME=V0,V1,...", spec)
	}
	var out []string
	for _, v := range strings.Split(values, ",") {
		if v == "" {
			return nil, fmt.Errorf("-cookie %q: an empty value", spec)
		}
		out = append(out, "\r\nCookie: "+name+"="+v)
	}
	return out, nil
}

var errStatus = errors.New("status not 2xx")

// readResponse reads one response, body included; keep says whether the
// connection stays open. A status outside 200-299 is an error after the
// response has been read.
func readResponse(br *bufio.Reader) (keep bool, err error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) {
		return false, fmt.Errorf("bad status line %q", line)
	}
	ok := line[9] == '2'
	keep = line[7] == '1'
	length, chunked := -1, false
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return false, err
		}
		if len(h) <= 2 {
			break
		}
		name, value, found := bytes.Cut(h, []byte(":"))
		if !found {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.Atoi(string(value))
			if err != nil {
				return false, fmt.Errorf("bad Content-Length %q", value)
			}
			length = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				keep = false
			} else if bytes.EqualFold(value, []byte("keep-alive")) {
				keep = true
			}
		}
	}
	switch {
	case chunked:
		for {
			l, err := br.ReadSlice('\n')
			if err != nil {
				return false, err
			}
			sz, _, _ := bytes.Cut(bytes.TrimSpace(l), []byte(";"))
			n, err := strconv.ParseInt(string(sz), 16, 32)
			if err != nil {
				return false, fmt.Errorf("bad chunk size %q", l)
			}
			if _, err := br.Discard(int(n) + 2); err != nil { // the chunk and its CRLF
				return false, err
			}
			if n == 0 { // no trailers from these servers
				break
			}
		}
	case length >= 0:
		if _, err := br.Discard(length); err != nil {
			return false, err
		}
	default: // until the server closes
		if _, err := io.Copy(io.Discard, br); err != nil {
			return false, err
		}
		keep = false
	}
	if !ok {
		return keep, errStatus
	}
	return keep, nil
}

// pct is the nearest-rank percentile p of sorted v (1 = the maximum).
func pct(v []int32, p float64) int32 {
	if len(v) == 0 {
		return -1
	}
	i := int(float64(len(v))*p+0.999999) - 1
	return v[max(0, min(i, len(v)-1))]
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
