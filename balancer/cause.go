package balancer

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ringlb/ringlb/balancer/reqbody"
	"github.com/ringlb/ringlb/balancer/transport"
)

// attemptCause is the cause of a failed attempt: transport.CauseClient when the
// client went away or its body could not be read, else transport.CauseOf(err).
func attemptCause(err error, r *http.Request, body *reqbody.Tracked) transport.Cause {
	if clientFault(r, body) {
		return transport.CauseClient
	}
	return transport.CauseOf(err)
}

// logEvery is the least time between two warnings for the same upstream
// and cause; failures in between are counted and reported with the next.
const logEvery = time.Second

// failLog rate-limits the warnings of one upstream and cause.
type failLog struct {
	last       atomic.Int64 // Unix nanoseconds of the last warning
	suppressed atomic.Int64 // failures not logged since
}

// allow says whether a warning may be written at now, and how many were
// held back since the last one.
func (l *failLog) allow(now int64) (bool, int64) {
	last := l.last.Load()
	if now-last < int64(logEvery) || !l.last.CompareAndSwap(last, now) {
		l.suppressed.Add(1)
		return false, 0
	}
	return true, l.suppressed.Swap(0)
}
