// Package mono is the process's monotonic clock, as time since one
// epoch, which the request path's timings share: time.Since reads only
// the monotonic clock where time.Now reads the wall clock too.
package mono

import "time"

// Epoch anchors Now.
var Epoch = time.Now()

// Now is the time since Epoch (never 0 after its first nanosecond).
func Now() time.Duration { return time.Since(Epoch) }
