package balancer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer/accesslog"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/options"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// A real consumer reads the combined log: goaccess (Debian's package)
// parses the log of a load run, every line valid, and counts as many
// requests as the client sent.
func TestAccessLogGoaccess(t *testing.T) {
	goaccess, err := exec.LookPath("goaccess")
	if err != nil {
		testenv.SkipExternal(t, "goaccess", "not on PATH (Debian: apt-get install goaccess)")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "access.log")
	l, err := accesslog.New(accesslog.Combined, path, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	opts := baseOptions(upstreamsOf(t, newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")))
	opts.Hash.Key = []key.Source{{Kind: key.Header, Name: "X-User-ID"}}
	opts.Hash.OnMissing = options.OnMissingReject
	opts.AccessLog, opts.RequestIDHeader = l, "X-Request-Id"
	_, _, front := proxy(t, opts)
	sent := 0
	for i := range 600 {
		var hdr []string
		if i%10 != 9 { // every tenth has no key: 400
			hdr = []string{"X-User-ID", fmt.Sprint("user-", i%37), "User-Agent", "load \"quoted\" agent", "Referer", "http://ref.example/p q"}
		}
		get(t, front.Client(), fmt.Sprintf("%s/item/%d?q=%%22x+y%%22", front.URL, i%50), hdr...)
		sent++
	}
	front.Close() // every handler has returned: every line is written
	l.Close()
	out := filepath.Join(dir, "report.json")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goaccess, path, "--log-format=COMBINED", "--no-global-config", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("goaccess: %v\n%s", err, b)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		General struct {
			Total  int `json:"total_requests"`
			Valid  int `json:"valid_requests"`
			Failed int `json:"failed_requests"`
		} `json:"general"`
	}
	if err := json.Unmarshal(data, &rep); err != nil {
		t.Fatal(err)
	}
	g := rep.General
	if g.Total != sent || g.Valid != sent || g.Failed != 0 {
		t.Errorf("goaccess counted %+v; the client sent %d", g, sent)
	}
	t.Logf("goaccess: %d requests, %d valid, %d failed; client sent %d", g.Total, g.Valid, g.Failed, sent)
}
