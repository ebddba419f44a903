package process

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// The hold block reaches the balancer with its secrets, in file order.
func TestBalancerOptionsHold(t *testing.T) {
	dir := t.TempDir()
	s1, s2 := strings.Repeat("a", 32), strings.Repeat("b", 40)
	if err := os.WriteFile(filepath.Join(dir, "hold.secret"), []byte(s1+"\n\n"+s2+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "c.yaml")
	src := "hold:\n  idle: 10m\n  max_keys: 5\n  cookie: {name: ringlb_hold, secret_file: hold.secret}\n" +
		"upstreams:\n  - name: a\n    url: http://127.0.0.1:9001\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	o, err := balancerOptions(cfg, &cfg.Pool)
	if err != nil {
		t.Fatal(err)
	}
	h := o.Hold
	if h.Idle != 10*time.Minute || h.MaxKeys != 5 || h.Cookie.Name != "ringlb_hold" ||
		!slices.EqualFunc(h.Cookie.Secrets, []string{s1, s2}, func(b []byte, s string) bool { return string(b) == s }) {
		t.Errorf("Hold = %+v", h)
	}
	cfg, err = config.Parse("c.yaml", []byte("upstreams:\n  - name: a\n    url: http://127.0.0.1:9001\n"))
	if err != nil {
		t.Fatal(err)
	}
	if o, err = balancerOptions(cfg, &cfg.Pool); err != nil {
		t.Fatal(err)
	}
	if h := o.Hold; h.Idle != 0 || h.Cookie.Name != "" {
		t.Errorf("no hold block: Hold = %+v, want off", h)
	}
}
