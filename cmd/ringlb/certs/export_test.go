package certs

import "time"

// SetTick makes Watch look at the files when c delivers, instead of on a
// ticker, so tests decide when looks happen.
func SetTick(o *WatchOptions, c <-chan time.Time) { o.tick = c }
