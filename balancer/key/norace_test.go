//go:build !race

package key

const raceEnabled = false
