//go:build race

package key

// raceEnabled says the race detector is on: sync.Pool then drops some of
// what is put in it, so pooled buffers allocate now and then.
const raceEnabled = true
