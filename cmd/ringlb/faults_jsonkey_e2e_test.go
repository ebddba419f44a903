//go:build e2e

package main

import (
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
)

// jsonKeyConfig keys on a JSON body field, with the default body_limit.
const jsonKeyConfig = `listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
debug_pprof: true
upstream_header: X-Upstream
hash:
  key: [json: prompt_cache_key]
  on_missing: reject
ring:
  load_factor: 0
timeouts:
  idle_conn: 1s
upstreams:
`

// startChecksumUpstream serves POSTs by reading the body through and
// answering with its length and CRC-32, holding no more than a copy
// buffer of it.
func startChecksumUpstream(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := crc32.NewIEEE()
		n, err := io.Copy(h, r.Body)
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		fmt.Fprintf(w, "%d %08x", n, h.Sum32())
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// jsonKeyUpload uploads a JSON body of about size bytes whose key field
// comes first, through a ringlb keyed on that field, and checks that the
// upstream its key names received every byte (length and CRC-32), and
// that ringlb's memory stayed within body_limit plus its buffers: its
// peak RSS (VmHWM) may grow by at most 16 MiB over what it was before the
// upload (the prefix is 64 KiB; the rest is the copy buffers and the
// runtime's slack), and never exceed 64 MiB.
func jsonKeyUpload(t *testing.T, size int64) faultRow {
	ups := map[string]string{"gpu-1": startChecksumUpstream(t), "gpu-2": startChecksumUpstream(t), "gpu-3": startChecksumUpstream(t)}
	lb := startRinglb(t, ringlbtest.WriteConfig(t, jsonKeyConfig+upstreamsBlock([]string{"gpu-1", "gpu-2", "gpu-3"}, ups, nil)))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("ringlb log:\n%s", lastLines(lb.logs.String(), 60))
		}
	})
	waitHTTP(t, lb.admin+"/readyz")
	base := measure(t, lb)
	pid := lb.cmd.Process.Pid
	hwm0 := procStatus(t, pid, "VmHWM")
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true}}

	var lk struct{ Chosen string }
	if err := json.Unmarshal([]byte(adminGet(t, lb.admin+"/debug/lookup?key="+url.QueryEscape("conv-1GiB"))), &lk); err != nil || lk.Chosen == "" {
		t.Fatalf("lookup: %+v, %v", lk, err)
	}

	// The body: the key first, then one long string, generated as it is
	// sent and checksummed on the way.
	head := `{"prompt_cache_key":"conv-1GiB","model":"m","prompt":"`
	tail := `"}`
	fill := size - int64(len(head)+len(tail))
	sum := crc32.NewIEEE()
	body := io.TeeReader(io.MultiReader(strings.NewReader(head), io.LimitReader(letters{}, fill), strings.NewReader(tail)), sum)

	// RSS sampled while the upload runs.
	var peakRSS int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if v := procStatus(t, pid, "VmRSS"); v > peakRSS {
					peakRSS = v
				}
			}
		}
	}()

	t0 := time.Now()
	req, _ := http.NewRequest(http.MethodPost, lb.proxy+"/v1/completions", body)
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = size
	res, err := client.Do(req)
	if err != nil {
		close(stop)
		t.Fatal(err)
	}
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	up := time.Since(t0)
	close(stop)
	wg.Wait()
	want := fmt.Sprintf("%d %08x", size, sum.Sum32())
	if res.StatusCode != 200 || string(got) != want || res.Header.Get("X-Upstream") != lk.Chosen {
		t.Errorf("upload: %d %q from %q; want %q from %s (the key's upstream)", res.StatusCode, got, res.Header.Get("X-Upstream"), want, lk.Chosen)
	}
	hwm := procStatus(t, pid, "VmHWM")
	if hwm-hwm0 > 16<<10 || hwm > 64<<10 {
		t.Errorf("ringlb's peak RSS (VmHWM) went from %d KiB to %d KiB: more than body_limit plus buffers (16 MiB of growth, 64 MiB in all)", hwm0, hwm)
	}
	resources := settle(t, lb, base, client)
	return faultRow{
		scenario: "json-key-1GiB",
		injected: fmt.Sprintf("%d MiB JSON upload keyed by json: prompt_cache_key, the field first (body_limit 64 KiB)", size>>20),
		clients: fmt.Sprintf("upload %s (%.0f MiB/s) to the key's upstream %s, length and CRC-32 exact",
			up.Round(10*time.Millisecond), float64(size)/(1<<20)/up.Seconds(), lk.Chosen),
		eject: "—", readmit: "—", keys: "—",
		resources: fmt.Sprintf("VmHWM %.1f MiB before, %.1f MiB after, VmRSS at most %.1f MiB during (limit: 16 MiB of growth); %s",
			float64(hwm0)/1024, float64(hwm)/1024, float64(peakRSS)/1024, resources),
	}
}

// letters reads as an endless run of lower-case letters: a JSON string's
// content.
type letters struct{}

func (letters) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'a' + byte(i%26)
	}
	return len(p), nil
}
