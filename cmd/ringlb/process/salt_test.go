package process

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlb/ringlb/balancer/keyhash"
	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// serve with hash.salt_file: the access log's key_hash is the salted hash
// of the key's ring position, /debug/lookup shows both, the key stays on
// its upstream, and a reload that reads a new salt changes the reported
// hashes and nothing else.
func TestServeSaltFile(t *testing.T) {
	bs := ringlbtest.StartBackends(t, 3, nil)
	dir := t.TempDir()
	logPath, cfg := filepath.Join(dir, "access.log"), filepath.Join(dir, "ringlb.yaml")
	writeSalt := func(s string) {
		if err := os.WriteFile(filepath.Join(dir, "salt"), []byte(s+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeSalt("first-fleet-salt-0123")
	data := "listen: 127.0.0.1:0\nadmin_listen: 127.0.0.1:0\naccess_log: {format: json, path: access.log}\n" +
		"hash:\n  key: [header: X-User-ID]\n  salt_file: salt\n" + ringlbtest.BackendsYAML(bs)
	if err := os.WriteFile(cfg, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	lb := startServe(t, cfg)
	lastHash := func(n int) string {
		t.Helper()
		var h string
		testenv.Eventually(t, 10*time.Second, func() error {
			b, _ := os.ReadFile(logPath)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			if len(lines) < n {
				return fmt.Errorf("%d lines, want %d", len(lines), n)
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(lines[n-1]), &m); err != nil {
				return err
			}
			h, _ = m["key_hash"].(string)
			return nil
		})
		return h
	}
	lookup := func() map[string]any {
		t.Helper()
		res, err := http.Get(lb.admin + "/debug/lookup?key=31337")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var m map[string]any
		b, _ := io.ReadAll(res.Body)
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		return m
	}
	pos := xxhash.Sum64String("31337")
	_, first := ringlbtest.Get(t, lb.proxy+"/", "X-User-ID", "31337")
	want := keyhash.Hex(keyhash.New([]byte("first-fleet-salt-0123")).Sum(pos))
	if got := lastHash(1); got != want {
		t.Errorf("logged key_hash %s, want %s (the ring position is %016x)", got, want, pos)
	}
	if m := lookup(); m["hash"] != fmt.Sprintf("%016x", pos) || m["key_hash"] != want || m["chosen"] != first {
		t.Errorf("lookup %v; want hash %016x, key_hash %s, chosen %s", m, pos, want, first)
	}

	writeSalt("second-fleet-salt-456")
	res, err := http.Post(lb.admin+"/reload", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("reload: %d %s", res.StatusCode, body)
	}
	_, again := ringlbtest.Get(t, lb.proxy+"/", "X-User-ID", "31337")
	want2 := keyhash.Hex(keyhash.New([]byte("second-fleet-salt-456")).Sum(pos))
	if got := lastHash(2); got != want2 || again != first {
		t.Errorf("after a new salt: logged %s from %s, want %s from %s", got, again, want2, first)
	}
}
