// Package inflight counts the requests in flight to each upstream URL, one
// count per URL however many pools have it, for limits.upstream_requests.
package inflight

import (
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
)

// Counts counts the requests in flight to each upstream URL, for
// limits.upstream_requests. A process with several Balancers (one per
// pool) gives them one Counts, so that an upstream serving several pools
// is limited across them; a Balancer made without one has its own. The
// zero value is not usable: call NewCounts.
type Counts struct {
	mu sync.Mutex
	m  map[string]*Count
}

// NewCounts returns an empty set of counts.
func NewCounts() *Counts {
	return &Counts{m: map[string]*Count{}}
}

// InFlight returns the requests in flight to the upstream at u, as
// counted for the limit.
func (c *Counts) InFlight(u *url.URL) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.m[Key(u)]; n != nil {
		return n.n.Load()
	}
	return 0
}

// Acquire returns the count of the URL whose Key is key, for one more
// Balancer using it; Release gives it back.
func (c *Counts) Acquire(key string) *Count {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.m[key]
	if n == nil {
		n = &Count{}
		c.m[key] = n
	}
	n.refs++
	return n
}

// Release drops one Balancer's use of key; the count is forgotten when no
// Balancer uses it (requests still in flight to it finish on the old one).
func (c *Counts) Release(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if n := c.m[key]; n != nil {
		if n.refs--; n.refs <= 0 {
			delete(c.m, key)
		}
	}
}

// Count is one upstream URL's count, shared by every member (of every
// Balancer) with that URL.
type Count struct {
	n    atomic.Int64
	refs int // Balancers using it; guarded by Counts.mu
}

// Take counts one more request unless that would exceed limit (0: no
// limit); it reports whether the request may go.
func (c *Count) Take(limit int64) bool {
	if n := c.n.Add(1); limit > 0 && n > limit {
		c.n.Add(-1)
		return false
	}
	return true
}

// Put counts a request that Take let go as ended.
func (c *Count) Put() { c.n.Add(-1) }

// Busy reports whether a request for c would be refused under limit.
func (c *Count) Busy(limit int64) bool { return limit > 0 && c.n.Load() >= limit }

// Key is the identity of an upstream URL for counting:
// scheme://host:port, lowercased, with the scheme's default port filled in,
// as the config compares URLs.
func Key(u *url.URL) string {
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

// Uses is the counts one Balancer's members use, by Key: each is
// acquired once however many members share its URL.
type Uses map[string]*Count

// Use returns the count of the URL at u, for a member of the Balancer
// whose counts in use were prev before: prev's count of it, or one
// acquired from c. It notes the count in us.
func (us Uses) Use(u *url.URL, prev Uses, c *Counts) *Count {
	k := Key(u)
	n := us[k]
	if n == nil {
		if n = prev[k]; n == nil {
			n = c.Acquire(k)
		}
		us[k] = n
	}
	return n
}

// ReleaseUnused releases to c the counts in prev that us does not use.
func (us Uses) ReleaseUnused(prev Uses, c *Counts) {
	for k := range prev {
		if us[k] == nil {
			c.Release(k)
		}
	}
}
