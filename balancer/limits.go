package balancer

import "github.com/ringlb/ringlb/balancer/inflight"

// countsLocked gives each member of s its URL's count, taking the counts
// of URLs that join this Balancer and releasing those of URLs that left
// it. Callers hold b.mu.
func (b *Balancer) countsLocked(s *snapshot) {
	next := make(inflight.Uses, len(s.members))
	for i := range s.members {
		s.members[i].count = next.Use(s.members[i].url, b.urls, b.counts)
	}
	next.ReleaseUnused(b.urls, b.counts)
	b.urls = next
}
