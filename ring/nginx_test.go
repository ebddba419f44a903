package ring

// TestNginxPlacement runs a real nginx with `hash $arg_k consistent` in
// front of tiny loopback backends and checks that every key lands where
// New(..., Options{Placement: PlacementNginx}) says (routing rule 7). A
// regression here means a fleet moving from nginx to ringlb would reshuffle
// its keys. Needs the nginx binary: CI installs it (apt-get install nginx)
// and fails without it; elsewhere the test is skipped when it is missing.

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/internal/testutil/nginxtest"
)

// backend serves its own identity on l.
func backend(t *testing.T, l net.Listener, id string) {
	t.Helper()
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, id)
	}))
	s.Listener.Close()
	s.Listener = l
	s.Start()
	t.Cleanup(s.Close)
}

// nginxPoints computes a server's points straight from the C source
// (ngx_http_upstream_init_chash), independently of buildNginx.
func nginxPoints(server string, weight int) []uint32 {
	host, port := server, ""
	if len(server) >= 5 && strings.EqualFold(server[:5], "unix:") {
		host = server[5:]
	} else if i := strings.LastIndexByte(server, ':'); i >= 0 && strings.Trim(server[i+1:], "0123456789") == "" {
		host, port = server[:i], server[i+1:]
	}
	base := crc32.ChecksumIEEE([]byte(host + "\x00" + port))
	var prev [4]byte
	out := make([]uint32, 0, 160*weight)
	for range 160 * weight {
		h := crc32.Update(base, crc32.IEEETable, prev[:])
		out = append(out, h)
		binary.LittleEndian.PutUint32(prev[:], h)
	}
	return out
}

type nginxUpstream struct {
	name    string
	members []Member
}

// startNginx writes a config with the given upstreams, each served under
// /NAME, starts nginx and returns its base URL. nginx is killed at cleanup.
func startNginx(t *testing.T, ups []nginxUpstream) string {
	t.Helper()
	var b strings.Builder
	for _, u := range ups {
		fmt.Fprintf(&b, "    upstream %s {\n        hash $arg_k consistent;\n", u.name)
		for _, m := range u.members {
			fmt.Fprintf(&b, "        server %s weight=%d max_fails=0;\n", m.Addr, int(m.Weight))
		}
		b.WriteString("    }\n")
	}
	var locs strings.Builder
	for _, u := range ups {
		fmt.Fprintf(&locs, "        location /%s { proxy_pass http://%s; }\n", u.name, u.name)
	}
	addr := nginxtest.Start(t, func(addr string) string {
		return fmt.Sprintf(`    proxy_next_upstream off;
%s
    server {
        listen %s;
        location = /ready { return 200 "ready"; }
%s    }
`, b.String(), addr, locs.String())
	})
	return "http://" + addr
}

// askNginx sends /UPSTREAM?k=KEY for every key and returns the identities
// that answered.
func askNginx(t *testing.T, base, upstream string, keys []string) []string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	out := make([]string, len(keys))
	for i, k := range keys {
		resp, err := c.Get(base + "/" + upstream + "?k=" + k)
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("key %q: status %d, body %q, err %v", k, resp.StatusCode, body, err)
		}
		out[i] = string(body)
	}
	return out
}

// nginxKeys are distinct, URL-safe keys, so $arg_k is the key as sent.
func nginxKeys(n int, prefix string) []string {
	rng := rand.New(rand.NewPCG(7, 8))
	const chars = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
	keys := make([]string, n)
	for i := range keys {
		var b strings.Builder
		fmt.Fprintf(&b, "%s%d-", prefix, i)
		for range 8 + rng.IntN(24) {
			b.WriteByte(chars[rng.IntN(len(chars))])
		}
		keys[i] = b.String()
	}
	return keys
}

func TestNginxPlacement(t *testing.T) {
	nginxtest.Binary(t) // skips (or fails under CI) before any backend starts

	// Three TCP backends of weights 2, 1, 3 and one on a unix socket
	// (nginx hashes its path with an empty port).
	var main nginxUpstream
	main.name = "main"
	for i, w := range []int{2, 1, 3} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		backend(t, l, addr)
		main.members = append(main.members, Member{Name: "tcp-" + strconv.Itoa(i), Addr: addr, Weight: float64(w)})
	}
	sock := filepath.Join(t.TempDir(), "b.sock")
	if l, err := net.Listen("unix", sock); err == nil {
		backend(t, l, "unix:"+sock)
		main.members = append(main.members, Member{Name: "unix", Addr: "unix:" + sock, Weight: 1})
	} else {
		t.Logf("no unix socket backend: %v", err)
	}
	ups := []nginxUpstream{main}

	// Two servers with a shared CRC32 point, listed in both orders: nginx
	// keeps the first listed server's point. Found by a birthday search
	// over loopback addresses on one port.
	tieA, tieB, tieOK := tiedBackends(t)
	if tieOK {
		ups = append(ups,
			nginxUpstream{"ab", []Member{{Name: "A", Addr: tieA, Weight: 1}, {Name: "B", Addr: tieB, Weight: 1}}},
			nginxUpstream{"ba", []Member{{Name: "B", Addr: tieB, Weight: 1}, {Name: "A", Addr: tieA, Weight: 1}}})
	}

	base := startNginx(t, ups)

	keys := nginxKeys(2000, "k")
	r := mustNew(t, main.members, Options{Placement: PlacementNginx})
	got := askNginx(t, base, "main", keys)
	perMember := map[string]int{}
	matched := 0
	for i, k := range keys {
		want := r.Members()[r.Owner(r.Hash(k))].Addr
		if got[i] != want {
			t.Errorf("key %q: nginx chose %s, ring says %s", k, got[i], want)
		} else {
			matched++
		}
		perMember[got[i]]++
	}
	t.Logf("main upstream: %d of %d keys matched; per backend %v", matched, len(keys), perMember)
	if len(perMember) != len(main.members) {
		t.Errorf("only %d of %d backends got keys", len(perMember), len(main.members))
	}

	if !tieOK {
		return
	}
	rab := mustNew(t, ups[1].members, Options{Placement: PlacementNginx})
	rba := mustNew(t, ups[2].members, Options{Placement: PlacementNginx})
	tieKeys := keysOnTie(t, rab, tieA, tieB)
	all := append(nginxKeys(300, "t"), tieKeys...)
	gotAB := askNginx(t, base, "ab", all)
	gotBA := askNginx(t, base, "ba", all)
	matched = 0
	for i, k := range all {
		wantAB := rab.Members()[rab.Owner(rab.Hash(k))].Addr
		wantBA := rba.Members()[rba.Owner(rba.Hash(k))].Addr
		if gotAB[i] != wantAB || gotBA[i] != wantBA {
			t.Errorf("key %q: nginx chose %s / %s, ring says %s / %s", k, gotAB[i], gotBA[i], wantAB, wantBA)
		} else {
			matched++
		}
	}
	for i := len(all) - len(tieKeys); i < len(all); i++ {
		if gotAB[i] != tieA || gotBA[i] != tieB {
			t.Errorf("tied key %q went to %s / %s, want the first listed: %s / %s", all[i], gotAB[i], gotBA[i], tieA, tieB)
		}
	}
	t.Logf("tie: %s and %s share a point; %d of %d keys (%d on the tied point) matched in both orders", tieA, tieB, matched, len(all), len(tieKeys))
}

// tiedBackends finds two loopback addresses on one port whose nginx
// points collide and starts a backend on each. ok is false if this host
// cannot bind 127.0.x.y.
func tiedBackends(t *testing.T) (a, b string, ok bool) {
	t.Helper()
	for attempt := 0; attempt < 5; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		_, port, _ := net.SplitHostPort(l.Addr().String())
		l.Close()
		seen := map[uint32]string{}
		a, b = "", ""
	search:
		for i := 0; i < 1<<14; i++ {
			addr := fmt.Sprintf("127.0.%d.%d:%s", 1+i/250, 1+i%250, port)
			for _, h := range nginxPoints(addr, 1) {
				if o, dup := seen[h]; dup && o != addr {
					a, b = o, addr
					break search
				}
				seen[h] = addr
			}
		}
		if a == "" {
			t.Fatal("no CRC32 point collision among 16384 addresses")
		}
		la, err := net.Listen("tcp", a)
		if err != nil {
			t.Logf("cannot bind %s (%v): skipping the tie check", a, err)
			return "", "", false
		}
		lb, err := net.Listen("tcp", b)
		if err != nil {
			la.Close()
			continue
		}
		backend(t, la, a)
		backend(t, lb, b)
		return a, b, true
	}
	t.Log("could not bind a tied pair: skipping the tie check")
	return "", "", false
}

// keysOnTie returns keys whose lookup lands on the point a and b share.
func keysOnTie(t *testing.T, r *Ring, a, b string) []string {
	t.Helper()
	pa := map[uint32]bool{}
	for _, h := range nginxPoints(a, 1) {
		pa[h] = true
	}
	var tie uint32
	for _, h := range nginxPoints(b, 1) {
		if pa[h] {
			tie = h
		}
	}
	idx := r.search(uint64(tie) << 32)
	if r.pts[idx].pos != uint64(tie)<<32 {
		t.Fatalf("tied point %08x missing from the ring", tie)
	}
	var out []string
	for i := 0; i < 10_000_000 && len(out) < 20; i++ {
		k := "tie-" + strconv.Itoa(i)
		if r.search(r.Hash(k)) == idx {
			out = append(out, k)
		}
	}
	if len(out) == 0 {
		t.Fatal("no key lands on the tied point")
	}
	return out
}
