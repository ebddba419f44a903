// Package demo is a stateful demo upstream: it answers with its name and
// counts visits per user in memory, so a user can see affinity hold (the
// count keeps counting) or break (the count restarts on another upstream).
//
// It serves:
//
//	GET /healthz               200 "ok", or 503 while told to fail its health check
//	POST /_demo/fail?health=1  fail the health check; ?requests=1 answers requests with 503
//	POST /_demo/recover        stop failing
//	GET /_demo/visits?user=U   U's visit count here, a number (for handoff)
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
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Upstream is one demo upstream. The zero value is not usable; use New.
type Upstream struct {
	name         string
	failHealth   atomic.Bool
	failRequests atomic.Bool

	user func(*http.Request) string
	// handoff, when set, is the header that names a user's previous
	// upstream (ringlb's handoff.header): a request carrying it takes
	// the user's count from there first (SetHandoff).
	handoff string
	client  *http.Client

	mu     sync.Mutex
	visits map[string]int
}

// SetHandoff makes the upstream read header, ringlb's handoff.header: on
// a request that carries it, the user's visit count is fetched from the
// upstream it names (GET its url's /_demo/visits) and counting goes on
// from there, so a user's count survives moving to this upstream. Call
// it before serving.
func (u *Upstream) SetHandoff(header string) {
	u.handoff = header
	u.client = &http.Client{Timeout: 2 * time.Second}
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
	case "/_demo/visits":
		u.mu.Lock()
		n := u.visits[r.URL.Query().Get("user")]
		u.mu.Unlock()
		fmt.Fprintln(w, n)
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
	var before int
	if u.handoff != "" {
		before = u.fetch(r.Header.Get(u.handoff), who)
	}
	u.mu.Lock()
	u.visits[who] = max(u.visits[who], before)
	u.visits[who]++
	n := u.visits[who]
	u.mu.Unlock()
	fmt.Fprintf(w, "user %s: visit %d on %s\n", who, n, u.name)
}

// fetch returns user's visit count at the upstream the handoff header
// value h names (0 without one, or when it does not answer).
func (u *Upstream) fetch(h, user string) int {
	base := sfParam(h, "url")
	if base == "" {
		return 0
	}
	resp, err := u.client.Get(base + "/_demo/visits?user=" + url.QueryEscape(user))
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 32))
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// sfParam returns the sf-string member name of an RFC 8941 dictionary
// such as `name="app-2", url="http://10.0.0.2:8080"`, or "". It reads
// only what ringlb writes: members whose values are strings.
func sfParam(dict, name string) string {
	for dict != "" {
		dict = strings.TrimLeft(dict, " ,")
		k, rest, ok := strings.Cut(dict, "=")
		if !ok || !strings.HasPrefix(rest, `"`) {
			return ""
		}
		var v strings.Builder
		i := 1
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
			}
			v.WriteByte(rest[i])
		}
		if k == name {
			return v.String()
		}
		dict = rest[min(i+1, len(rest)):]
	}
	return ""
}
