package balancer

import "github.com/ringlb/ringlb/balancer/inflight"

// countsLocked gives each member of s its URL's count, taking the counts
// of URLs that join this Balancer and releasing those of URLs that left
// it. Callers hold b.mu.
func (b *Balancer) countsLocked(s *snapshot) {
	next := make(map[string]*inflight.Count, len(s.members))
	for i := range s.members {
		k := inflight.Key(s.members[i].url)
		c := next[k]
		if c == nil {
			if c = b.urls[k]; c == nil {
				c = b.counts.Acquire(k)
			}
			next[k] = c
		}
		s.members[i].count = c
	}
	for k := range b.urls {
		if next[k] == nil {
			b.counts.Release(k)
		}
	}
	b.urls = next
}
