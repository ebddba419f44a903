package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/cmd/ringlb/demo"
	"github.com/ringlb/ringlb/cmd/ringlb/process"
)

func cmdDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	path, cfg, code, ok := loadCommand("demo", args, stdout, stderr)
	if !ok {
		return code
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))

	// Start every upstream in-process, on loopback only.
	var servers []*http.Server
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	bound := map[string]bool{} // a URL two pools share is served once
	for _, p := range cfg.Serving() {
		pc, field := poolConfig(cfg, p), "upstreams"
		if cfg.Pools != nil {
			field = "pools." + p.Name + ".upstreams"
		}
		who := demoUser(pc)
		for i, u := range p.Upstreams {
			addr, err := demoAddr(u)
			if err != nil {
				fmt.Fprintf(stderr, "%s: %s[%d].url: %v\n", path, field, i, err)
				return exitFail
			}
			if bound[addr] {
				continue
			}
			bound[addr] = true
			l, err := net.Listen("tcp", addr)
			if err != nil {
				fmt.Fprintf(stderr, "ringlb demo: %s\n", process.BindError("demo upstream "+u.Name, addr, err))
				return exitFail
			}
			s := &http.Server{Handler: demo.NewKeyed(u.Name, who), ReadHeaderTimeout: 10 * time.Second}
			// HTTP/1.1 and cleartext HTTP/2, so that an upstream declared
			// protocol: h2c is answered too.
			s.Protocols = new(http.Protocols)
			s.Protocols.SetHTTP1(true)
			s.Protocols.SetUnencryptedHTTP2(true)
			servers = append(servers, s)
			go s.Serve(l)
		}
	}
	intro, pool := cfg, ""
	if cfg.Pools != nil {
		intro, pool = poolConfig(cfg, &cfg.Pools[0]), cfg.Pools[0].Name
	}
	// The demo reloads on SIGHUP and POST /reload only: no watch.
	return runProcess(ctx, process.Options{Path: path, Config: cfg, Logger: logger, Ready: func(proxy, admin net.Addr) {
		text := demoIntro(intro, pool, proxy.String(), admin.String())
		if cfg.Pools != nil {
			text = demoPools(cfg) + text
		}
		fmt.Fprint(stdout, text)
	}})
}

// demoPools says, for a config with pools, which pools run and how
// requests reach them; the rest of the introduction is the first pool's.
func demoPools(cfg *config.Config) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Pools:")
	for _, p := range cfg.Pools {
		fmt.Fprintf(&b, " %s (%d upstreams)", p.Name, len(p.Upstreams))
	}
	b.WriteString("\nRoutes, first match wins:\n")
	for _, r := range cfg.Routes {
		host, prefix := r.Host, r.PathPrefix
		if host == "" {
			host = "any host"
		}
		if prefix == "" {
			prefix = "any path"
		}
		fmt.Fprintf(&b, "  %s, %s → %s\n", host, prefix, r.Pool)
	}
	fmt.Fprintf(&b, "What follows is about pool %s; the status page shows each pool.\n\n", cfg.Pools[0].Name)
	return b.String()
}

// demoAddr returns the loopback address a demo upstream listens on, or an
// error for a URL the demo must not bind.
func demoAddr(u config.Upstream) (string, error) {
	if u.URL.Scheme != "http" {
		return "", fmt.Errorf("the demo serves plain http only, got %s", u.URL.Redacted())
	}
	host, port := u.URL.Hostname(), u.URL.Port()
	if port == "" {
		port = "80"
	}
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return "", fmt.Errorf("the demo starts upstreams on loopback addresses only, got %s", u.URL.Redacted())
	}
	return net.JoinHostPort(host, port), nil
}

// demoUser tells the demo upstreams' users apart as the config's key does:
// the affinity cookie under on_missing: cookie, then the first key source
// present; else the path, or, under on_missing: cookie, "": a first visit
// without a key, whose affinity id ringlb sets on the answer only, so the
// upstream cannot count it for that user. (The ip source sees the client's
// address as ringlb forwards it, the last X-Forwarded-For entry.)
func demoUser(cfg *config.Config) func(*http.Request) string {
	h := cfg.Hash
	return func(r *http.Request) string {
		cookie := func(name string) string {
			if c, err := r.Cookie(name); err == nil {
				return c.Value
			}
			return ""
		}
		if h.OnMissing == "cookie" {
			if v := cookie(h.Cookie.Name); v != "" {
				return v
			}
		}
		for _, k := range h.Key {
			var v string
			switch k.Kind {
			case key.Cookie:
				v = cookie(k.Name)
			case key.Header:
				v = r.Header.Get(k.Name)
			case key.Query:
				v = r.URL.Query().Get(k.Name)
			case key.URI:
				v = r.RequestURI
			case key.Path:
				v = r.URL.Path
			case key.IP:
				xff := strings.Split(r.Header.Get("X-Forwarded-For"), ",")
				v = strings.TrimSpace(xff[len(xff)-1])
			}
			if v != "" {
				return v
			}
		}
		if h.OnMissing == "cookie" {
			return ""
		}
		return r.URL.Path
	}
}

// demoKey is how a curl command line gives a request a key: the first key
// source in the config (any source before it is absent on a plain curl, so
// this one decides).
type demoKey struct {
	desc string // "header X-User-ID"
	// curl returns the curl arguments and the URL path that give a request
	// the key of user u (a literal like 42, or a shell word like $u).
	curl func(u string) (flags, path string)
	// key is the key a request for user u hashes on.
	key func(u string) string
	// shared is set when every request from one machine has the same key.
	shared bool
}

func firstDemoKey(cfg *config.Config) demoKey {
	return demoKeyOf(cfg.Hash.Key[0])
}

func demoKeyOf(k key.Source) demoKey {
	d := demoKey{desc: k.String()}
	d.key = func(u string) string { return u }
	switch k.Kind {
	case key.Host:
		d.curl = func(u string) (string, string) {
			return fmt.Sprintf("-H %s ", shellQuote("Host: user-"+u+".example")), "/"
		}
		d.key = func(u string) string { return "user-" + u + ".example" }
	case key.JSON:
		body := `"$U"`
		fields := strings.Split(k.Name, ".")
		for i := len(fields) - 1; i >= 0; i-- {
			body = `{"` + fields[i] + `":` + body + `}`
		}
		d.curl = func(u string) (string, string) {
			b := strings.ReplaceAll(strings.ReplaceAll(body, `"`, `\"`), "$U", u)
			return `-H 'Content-Type: application/json' -d "` + b + `" `, "/"
		}
	case key.Prefix:
		// A chat body whose first user message names the user: its key
		// is the model and that message, canonical.
		d.curl = func(u string) (string, string) {
			return `-H 'Content-Type: application/json' -d "{\"model\":\"demo\",\"messages\":[{\"role\":\"user\",\"content\":\"user ` + u + `\"}]}" `, "/"
		}
		n := k.Bytes
		d.key = func(u string) string {
			v := "\"demo\"\n{\"content\":\"user " + u + "\",\"role\":\"user\"}"
			return v[:min(len(v), n)]
		}
	case key.Combine:
		parts := make([]demoKey, len(k.Sources))
		for i, p := range k.Sources {
			parts[i] = demoKeyOf(p)
			d.shared = d.shared || parts[i].shared
		}
		d.curl = func(u string) (string, string) {
			flags, path := "", "/"
			for _, p := range parts {
				f, pp := p.curl(u)
				flags += f
				if pp != "/" {
					path = pp
				}
			}
			return flags, path
		}
		d.key = func(u string) string {
			var ks []string
			for _, p := range parts {
				ks = append(ks, p.key(u))
			}
			return strings.Join(ks, "\x00")
		}
	case key.Cookie:
		d.curl = func(u string) (string, string) { return fmt.Sprintf("-b %s ", shellQuote(k.Name+"="+u)), "/" }
	case key.Header:
		d.curl = func(u string) (string, string) { return fmt.Sprintf("-H %s ", shellQuote(k.Name+": "+u)), "/" }
	case key.Query:
		d.curl = func(u string) (string, string) { return "", "/?" + url.QueryEscape(k.Name) + "=" + u }
	case key.URI, key.Path:
		d.curl = func(u string) (string, string) { return "", "/users/" + u }
		d.key = func(u string) string { return "/users/" + u }
	case key.IP:
		d.curl = func(string) (string, string) { return "", "/" }
		d.key = func(string) string { return "127.0.0.1" }
		d.shared = true
	}
	return d
}

// shellQuote quotes s for a POSIX shell when a $ or space needs it: single
// quotes for literals, double quotes when s holds a $u to expand.
func shellQuote(s string) string {
	if strings.Contains(s, "$") {
		return `"` + s + `"`
	}
	if strings.ContainsAny(s, " ;&|<>'\"\\*?") {
		return "'" + s + "'"
	}
	return s
}

// demoPorts lists the ports the demo holds, e.g. "8080 (proxy), 9901
// (admin) and 9001-9004 (upstreams)".
func demoPorts(cfg *config.Config, proxy, admin string) string {
	port := func(addr string) string {
		_, p, _ := net.SplitHostPort(addr)
		return p
	}
	var ups []int
	for _, u := range cfg.Upstreams {
		if a, err := demoAddr(u); err == nil {
			if n, err := strconv.Atoi(port(a)); err == nil {
				ups = append(ups, n)
			}
		}
	}
	slices.Sort(ups)
	list := ""
	if len(ups) > 0 && ups[len(ups)-1]-ups[0] == len(ups)-1 {
		list = strconv.Itoa(ups[0])
		if len(ups) > 1 {
			list += "-" + strconv.Itoa(ups[len(ups)-1])
		}
	} else {
		s := make([]string, len(ups))
		for i, p := range ups {
			s[i] = strconv.Itoa(p)
		}
		list = strings.Join(s, ", ")
	}
	return fmt.Sprintf("%s (proxy), %s (admin) and %s (upstreams)", port(proxy), port(admin), list)
}

// demoIntro is what the demo prints once it serves: which ports it holds,
// how to stop it, and curl commands built from the config's key sources.
// pool names the pool cfg is, for the admin URLs, when the config has
// several ("" otherwise).
func demoIntro(cfg *config.Config, pool, proxy, admin string) string {
	names := make([]string, len(cfg.Upstreams))
	for i, u := range cfg.Upstreams {
		names[i] = u.Name
	}
	base := "http://" + proxy
	var b strings.Builder
	fmt.Fprintf(&b, "\nringlb demo: %d stateful upstreams (%s) behind the proxy at %s\n",
		len(names), strings.Join(names, ", "), base)
	fmt.Fprintf(&b, "It holds ports %s on loopback; Ctrl-C stops it and frees them.\n\n", demoPorts(cfg, proxy, admin))

	var srcs []string
	for _, k := range cfg.Hash.Key {
		s := string(k.Kind)
		if k.Name != "" {
			s += " " + k.Name
		}
		srcs = append(srcs, s)
	}
	fmt.Fprintf(&b, "The key is the first of: %s (on_missing: %s).\n", strings.Join(srcs, ", "), cfg.Hash.OnMissing)
	k := firstDemoKey(cfg)
	curl := func(u string) string {
		flags, p := k.curl(u)
		return fmt.Sprintf("curl -s %s%s", flags, shellQuote(base+p))
	}
	if k.shared {
		fmt.Fprintf(&b, "Every request from this machine has the key 127.0.0.1 (%s), so all go to one upstream,\n", k.desc)
		fmt.Fprintf(&b, "whose visit counter keeps counting:\n")
		fmt.Fprintf(&b, "  for i in 1 2 3; do %s; done\n", curl("42"))
	} else {
		fmt.Fprintf(&b, "Each user sticks to one upstream, whose visit counter keeps counting (%s):\n", k.desc)
		fmt.Fprintf(&b, "  for i in 1 2 3; do %s; done\n", curl("42"))
		if users := demoSpread(cfg, k); len(users) > 0 {
			fmt.Fprintf(&b, "%d users spread over the upstreams, each upstream serving some of them:\n", len(users))
			fmt.Fprintf(&b, "  for u in %s; do %s; done\n", strings.Join(users, " "), curl("$u"))
		}
	}
	switch cfg.Hash.OnMissing {
	case "cookie":
		fmt.Fprintf(&b, "A client with no key gets the affinity cookie %s on its first answer (that visit has no\n", cfg.Hash.Cookie.Name)
		fmt.Fprintf(&b, "user yet, so the upstream does not count it); keep the cookie in a jar and it sticks:\n")
		fmt.Fprintf(&b, "  for i in 1 2 3; do curl -s -c jar -b jar %s/; done\n", base)
	case "reject":
		fmt.Fprintf(&b, "A request with none of those gets 400:\n  curl -s %s/\n", base)
	}
	key := k.key("42")
	inPool, ringURL := "", "http://"+admin+"/debug/ring"
	if pool != "" {
		inPool, ringURL = "pool="+url.QueryEscape(pool)+"&", "'"+ringURL+"?pool="+url.QueryEscape(pool)+"'"
	}
	fmt.Fprintf(&b, "Where would the key %s go, and why:\n", key)
	fmt.Fprintf(&b, "  curl -s 'http://%s/debug/lookup?%skey=%s'\n", admin, inPool, url.QueryEscape(key))
	fmt.Fprintf(&b, "The ring, its upstreams and their state:\n")
	fmt.Fprintf(&b, "  curl -s %s    (status page: http://%s/)\n", ringURL, admin)

	if victim := demoOwner(cfg, key); victim != nil {
		b.WriteString(demoFailHint(cfg, victim, key, curl("42")))
	}
	fmt.Fprintf(&b, "Press Ctrl-C to stop.\n\n")
	return b.String()
}
