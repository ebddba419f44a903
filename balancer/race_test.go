//go:build race

package balancer

// raceEnabled says the race detector is on: it allocates where a plain
// build does not (sync.Pool drops some of what is put in it).
const raceEnabled = true
