package config

import "sort"

// maxSuggestDistance is how far (in edits) an unknown field name may be
// from a known one for the known one to be suggested: `keys` is one edit
// from `key`, `wieght` one from `weight` (a swap of neighbours counts as
// one edit), `lisen_addr` too far from anything.
const maxSuggestDistance = 2

// suggest returns the known field closest to an unknown name, or "" when
// none is close: within maxSuggestDistance edits, and fewer than half of
// the name's letters (so that `base` suggests nothing rather than `hash`).
// Of equally close fields the first in alphabetical order is taken, so the
// message is the same on every run.
func suggest[K ~string, V any](name string, known map[K]V) string {
	keys := make([]string, 0, len(known))
	for k := range known {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	best, bestD := "", maxSuggestDistance+1
	for _, k := range keys {
		if d := editDistance(name, k); d < bestD && 2*d < len(name) {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// the fewest insertions, deletions, substitutions and swaps of adjacent
// bytes that turn a into b (a substring edited once).
func editDistance(a, b string) int {
	// Three rows of the table: i-2, i-1 and i.
	pp := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], pp[j-2]+1)
			}
		}
		pp, prev, cur = prev, cur, pp
	}
	return prev[len(b)]
}

// didYouMean is " (did you mean X?)" for the known name closest to name
// (see suggest), or "" when none is close.
func didYouMean[K ~string, V any](name string, known map[K]V) string {
	if s := suggest(name, known); s != "" {
		return " (did you mean " + s + "?)"
	}
	return ""
}
