package metrics

import (
	"runtime"
	"strconv"
	"testing"
)

// TestUpstreamMetricsHeap bounds what each upstream's metrics hold: the
// Prometheus children (~3.4 KB) and one block of status codes once it
// has answered: 3.7 KB with a 200 answered; a table of all 600 codes
// made it 8.5 KB.
func TestUpstreamMetricsHeap(t *testing.T) {
	const n = 1000
	m := NewPool("p")
	ums := make([]*Upstream, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range ums {
		ums[i] = m.ForUpstream("u" + strconv.Itoa(i))
		ums[i].Code(200).Inc()
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n
	t.Logf("%d bytes per upstream", per)
	if per > 6<<10 {
		t.Errorf("each upstream's metrics hold %d bytes", per)
	}
	runtime.KeepAlive(ums)
}
