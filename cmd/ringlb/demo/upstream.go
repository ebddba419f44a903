// Package demo is a stateful demo upstream: it answers with its name and
// counts visits per user in memory, so a user can see affinity hold (the
// count keeps counting) or break (the count restarts on another upstream).
//
// It serves:
//
//	GET /healthz               200 "ok", or 503 while told to fail its health check
//	POST /_demo/fail?health=1  fail the health check; ?requests=1 answers requests with 503
//	POST /_demo/recover        stop failing
//	anything else              "user U: visit N on NAME", U from the query
//	                           parameter user, the X-User-ID header, the
//	                           session cookie, or else the path (the
//	                           default config's key sources); NewKeyed
//	                           takes another rule, under which a request
//	                           may have no user: "a visitor with no key
//	                           yet: not counted, on NAME"
package demo

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
)

// Upstream is one demo upstream. The zero value is not usable; use New.
type Upstream struct {
	name         string
	failHealth   atomic.Bool
	failRequests atomic.Bool

	user func(*http.Request) string

	mu     sync.Mutex
	visits map[string]int
}

// New returns a demo upstream called name that tells users apart as the
// default config's key sources do.
func New(name string) *Upstream {
	return NewKeyed(name, nil)
}

// NewKeyed returns a demo upstream called name that counts visits per
// user(r); nil means as New does. A request for which user returns "" has
// no user (a first visit without a key, say): it is answered, and not
// counted.
func NewKeyed(name string, user func(*http.Request) string) *Upstream {
	if user == nil {
		user = defaultUser
	}
	return &Upstream{name: name, user: user, visits: make(map[string]int)}
}

// FailHealth makes the health check fail (true) or pass (false).
func (u *Upstream) FailHealth(fail bool) { u.failHealth.Store(fail) }

// FailRequests makes every request but the health check answer 503 (true).
func (u *Upstream) FailRequests(fail bool) { u.failRequests.Store(fail) }

// defaultUser returns who a request is for, as the default config's key
// sees it.
func defaultUser(r *http.Request) string {
	if v := r.URL.Query().Get("user"); v != "" {
		return v
	}
	if v := r.Header.Get("X-User-ID"); v != "" {
		return v
	}
	if c, err := r.Cookie("session"); err == nil && c.Value != "" {
		return c.Value
	}
	return r.URL.Path
}

// ServeHTTP implements http.Handler.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	switch r.URL.Path {
	case "/healthz":
		if u.failHealth.Load() {
			http.Error(w, u.name+": failing its health check", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
		return
	case "/_demo/fail", "/_demo/recover":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			http.Error(w, "use POST", http.StatusMethodNotAllowed)
			return
		}
		heal := r.URL.Path == "/_demo/recover"
		q := r.URL.Query()
		u.FailHealth(!heal && q.Get("health") != "")
		u.FailRequests(!heal && q.Get("requests") != "")
		fmt.Fprintf(w, "%s: fail health %v, fail requests %v\n", u.name, u.failHealth.Load(), u.failRequests.Load())
		return
	}
	if u.failRequests.Load() {
		http.Error(w, u.name+": told to fail requests", http.StatusServiceUnavailable)
		return
	}
	who := u.user(r)
	if who == "" {
		fmt.Fprintf(w, "a visitor with no key yet: not counted, on %s\n", u.name)
		return
	}
	u.mu.Lock()
	u.visits[who]++
	n := u.visits[who]
	u.mu.Unlock()
	fmt.Fprintf(w, "user %s: visit %d on %s\n", who, n, u.name)
}
