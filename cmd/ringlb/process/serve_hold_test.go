package process

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
)

// Two `ringlb serve` replicas with one secret file: the second starts
// after an upstream was added, never having seen a key, and honours the
// hold cookies the first set; a reload that adds a second secret ahead of
// the first (rotation) keeps honouring them.
func TestServeHoldAcrossReplicas(t *testing.T) {
	bs := ringlbtest.StartBackends(t, 5, nil)
	dir := t.TempDir()
	secret := filepath.Join(dir, "hold.secret")
	old := strings.Repeat("o", 32)
	if err := os.WriteFile(secret, []byte(old+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := func(n int) string {
		return ringlbtest.Listeners + "hash:\n  key: [header: X-User-ID]\n  on_missing: reject\n" +
			"hold:\n  idle: 10m\n  cookie: {name: ringlb_hold, secret_file: " + secret + "}\n" + ringlbtest.BackendsYAML(bs[:n])
	}
	path := filepath.Join(dir, "ringlb.yaml")
	write := func(n int) {
		if err := os.WriteFile(path, []byte(cfg(n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(4)
	r1 := startServe(t, path)
	send := func(r *running, key, cookie string) (where, set string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, r.proxy+"/", nil)
		req.Header.Set("X-User-ID", key)
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: "ringlb_hold", Value: cookie})
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != 200 {
			t.Fatalf("key %s: %d %s", key, res.StatusCode, body)
		}
		for _, c := range res.Cookies() {
			if c.Name == "ringlb_hold" {
				set = c.Value
			}
		}
		return string(body), set
	}
	where, cookie := map[string]string{}, map[string]string{}
	for i := range 100 {
		k := fmt.Sprint("user-", i)
		where[k], cookie[k] = send(r1, k, "")
		if cookie[k] == "" {
			t.Fatalf("key %s: no hold cookie", k)
		}
	}

	write(5) // app-5 joins
	r2 := startServe(t, path)
	var moved []string
	for k := range where {
		if owner := lookupOwner(t, r2.admin, k); owner != where[k] {
			if owner != "app-5" {
				t.Fatalf("key %s: owner %s after adding app-5, was %s", k, owner, where[k])
			}
			moved = append(moved, k)
		}
	}
	if len(moved) < 5 {
		t.Fatalf("adding app-5 moves %d of 100 keys", len(moved))
	}
	for _, k := range moved[:len(moved)/2] {
		if got, _ := send(r2, k, cookie[k]); got != where[k] {
			t.Errorf("replica 2, key %s with replica 1's cookie: %s, want %s", k, got, where[k])
		}
	}
	// Rotation: a new secret first, the old one second; replica 2 reloads.
	if err := os.WriteFile(secret, []byte(strings.Repeat("n", 48)+"\n"+old+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	res, err := http.Post(r2.admin+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("reload: %d", res.StatusCode)
	}
	for _, k := range moved[len(moved)/2:] {
		if got, _ := send(r2, k, cookie[k]); got != where[k] {
			t.Errorf("after rotation, key %s with the old secret's cookie: %s, want %s", k, got, where[k])
		}
		if got, _ := send(r2, k+"-new", cookie[k]); got != lookupOwner(t, r2.admin, k+"-new") {
			t.Errorf("key %s-new with the cookie of %s went to %s, not its owner", k, k, got)
		}
	}
	_, metrics := ringlbtest.Get(t, r2.admin+"/metrics")
	if !strings.Contains(metrics, fmt.Sprintf("ringlb_held_total{pool=\"default\"} %d\n", len(moved))) {
		t.Errorf("replica 2 metrics lack ringlb_held_total %d", len(moved))
	}
}

// lookupOwner asks /debug/lookup for key's owner.
func lookupOwner(t *testing.T, admin, key string) string {
	t.Helper()
	_, body := ringlbtest.Get(t, admin+"/debug/lookup?key="+key)
	_, rest, ok := strings.Cut(body, `"owner": "`)
	owner, _, ok2 := strings.Cut(rest, `"`)
	if !ok || !ok2 {
		t.Fatalf("lookup %s: %s", key, body)
	}
	return owner
}
