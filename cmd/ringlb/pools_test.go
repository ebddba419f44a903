package main

import (
	"strings"
	"testing"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
)

// validate summarises each pool and names the pool in its errors;
// simulate needs -pool with several pools.
func TestPoolsCommands(t *testing.T) {
	good := ringlbtest.WriteConfig(t, "pools:\n  a:\n    upstreams: [{name: x, url: http://127.0.0.1:19001}, {name: y, url: http://127.0.0.1:19002}]\n"+
		"  b:\n    ring: {points_per_weight: 10}\n    upstreams: [{name: x, url: http://127.0.0.1:19101}]\nroutes: [{path_prefix: /b, pool: b}, {pool: a}]\n")
	code, out, errOut := runCmd(t, "validate", good)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != exitOK || errOut != "" || len(lines) != 3 || !strings.HasSuffix(lines[0], ": ok: 2 pools (a, b), 2 routes") ||
		!strings.HasPrefix(lines[1], "  pool a: 2 upstreams, 320 points, placement ringlb, version ") ||
		!strings.HasPrefix(lines[2], "  pool b: 1 upstream, 10 points, placement ringlb, version ") {
		t.Errorf("validate: exit %d\n%s%s", code, out, errOut)
	}
	bad := ringlbtest.WriteConfig(t, "pools:\n  sessions:\n    upstreams:\n      - {name: x, url: http://127.0.0.1:1}\n      - {name: y, url: http://127.0.0.1:2}\n      - {name: z, url: http://127.0.0.1:3, weight: 0}\nroutes: [{pool: sessions}]\n")
	if code, _, errOut := runCmd(t, "validate", bad); code != exitFail || !strings.Contains(errOut, ":6: pools.sessions.upstreams[2].weight: must be > 0, got 0") {
		t.Errorf("validate of a bad pool: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runCmd(t, "simulate", "-keys", "1000", good); code != exitUsage || !strings.Contains(errOut, "-pool: required with several pools: a, b") {
		t.Errorf("simulate without -pool: exit %d, %s", code, errOut)
	}
	if code, _, errOut := runCmd(t, "simulate", "-keys", "1000", "-pool", "c", good); code != exitUsage || !strings.Contains(errOut, `-pool: no pool "c"; pools: a, b`) {
		t.Errorf("simulate -pool c: exit %d, %s", code, errOut)
	}
	code, out, _ = runCmd(t, "simulate", "-keys", "1000", "-pool", "b", "-add", "w", good)
	if code != exitOK || !strings.Contains(out, "1000 keys over 1 upstreams (10 points") {
		t.Errorf("simulate -pool b: exit %d\n%s", code, out)
	}
}
