package downstream

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRecycleKeepsWhatOthersReach: a Writer that a send watch's
// timer may still read (it went off, or is still set) or whose
// connection became a tunnel is not cleared for reuse; any other is.
func TestRecycleKeepsWhatOthersReach(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	for _, tc := range []struct {
		name string
		set  func(*Writer)
		kept bool
	}{
		{"fired", func(w *Writer) { w.sendFired = true }, true},
		{"sending", func(w *Writer) { w.sending = true }, true},
		{"tunnel", func(w *Writer) { w.tunnel = c1 }, true},
		{"done", func(*Writer) {}, false},
	} {
		w := NewWriter(httptest.NewRecorder())
		w.Status = http.StatusTeapot
		tc.set(w)
		w.Recycle()
		if kept := w.Status == http.StatusTeapot; kept != tc.kept {
			t.Errorf("%s: kept = %v, want %v", tc.name, kept, tc.kept)
		}
	}
}
