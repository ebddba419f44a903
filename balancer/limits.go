package balancer

import (
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// LimitOptions are the limits a request is held to.
type LimitOptions struct {
	// UpstreamRequests is the most requests in flight to one upstream URL,
	// counted in the Balancer's UpstreamCounts (so across every Balancer
	// sharing them); 0 for no limit. A request for an upstream already
	// holding that many is answered 503 "upstream busy" at once: never
	// retried elsewhere (that would move its key) and never counted
	// against the upstream's breaker.
	UpstreamRequests int
	// Send is the longest one write (or flush) to the client may block;
	// 0 for no limit. A write that takes longer cuts the request: the
	// client's stream or connection is broken off and the upstream
	// connection closed. Each write that completes starts the wait anew,
	// so a slow reader that keeps reading is never cut.
	Send time.Duration
	// BodyMemory is the most bytes of request bodies held at once to find
	// their keys (json sources), all requests of every Balancer sharing
	// the process's families together (a Router's pools); 0 for no limit.
	// Memory is taken as the bytes arrive, never for what a Content-Length
	// declares: a buffer starts at 4 KiB and doubles when full, up to
	// hash.body_limit (or the declared length, if smaller). A request
	// whose buffer would take the total beyond the limit is answered 503
	// at once, counted in ringlb_body_memory_refused_total; the bytes held
	// are ringlb_body_memory_bytes.
	BodyMemory int64
}

// UpstreamCounts counts the requests in flight to each upstream URL, for
// LimitOptions.UpstreamRequests. A process with several Balancers (one per
// pool) gives them one UpstreamCounts, so that an upstream serving several
// pools is limited across them; a Balancer made without one has its own.
// The zero value is not usable: call NewUpstreamCounts.
type UpstreamCounts struct {
	mu sync.Mutex
	m  map[string]*urlCount
}

// NewUpstreamCounts returns an empty set of counts.
func NewUpstreamCounts() *UpstreamCounts {
	return &UpstreamCounts{m: map[string]*urlCount{}}
}

// InFlight returns the requests in flight to the upstream at u, as
// counted for the limit.
func (c *UpstreamCounts) InFlight(u *url.URL) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.m[urlKey(u)]; n != nil {
		return n.n.Load()
	}
	return 0
}

// urlCount is one upstream URL's count, shared by every member (of every
// Balancer) with that URL.
type urlCount struct {
	n    atomic.Int64
	refs int // Balancers using it; guarded by UpstreamCounts.mu
}

// take counts one more request unless that would exceed limit (0: no
// limit); it reports whether the request may go.
func (c *urlCount) take(limit int64) bool {
	if n := c.n.Add(1); limit > 0 && n > limit {
		c.n.Add(-1)
		return false
	}
	return true
}

func (c *urlCount) put() { c.n.Add(-1) }

// busy reports whether a request for c would be refused under limit.
func (c *urlCount) busy(limit int64) bool { return limit > 0 && c.n.Load() >= limit }

func (c *UpstreamCounts) acquire(key string) *urlCount {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.m[key]
	if n == nil {
		n = &urlCount{}
		c.m[key] = n
	}
	n.refs++
	return n
}

// release drops one Balancer's use of key; the count is forgotten when no
// Balancer uses it (requests still in flight to it finish on the old one).
func (c *UpstreamCounts) release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.m[key]; n != nil {
		if n.refs--; n.refs <= 0 {
			delete(c.m, key)
		}
	}
}

// urlKey is the identity of an upstream URL for counting:
// scheme://host:port, lowercased, with the scheme's default port filled in,
// as the config compares URLs.
func urlKey(u *url.URL) string {
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if u.Port() == "" {
		switch scheme {
		case "https":
			host += ":443"
		default:
			host += ":80"
		}
	}
	return scheme + "://" + host
}

// countsLocked gives each member of s its URL's count, taking the counts
// of URLs that join this Balancer and releasing those of URLs that left
// it. Callers hold b.mu.
func (b *Balancer) countsLocked(s *snapshot) {
	next := make(map[string]*urlCount, len(s.members))
	for i := range s.members {
		k := urlKey(s.members[i].url)
		c := next[k]
		if c == nil {
			if c = b.urls[k]; c == nil {
				c = b.counts.acquire(k)
			}
			next[k] = c
		}
		s.members[i].count = c
	}
	for k := range b.urls {
		if next[k] == nil {
			b.counts.release(k)
		}
	}
	b.urls = next
}
