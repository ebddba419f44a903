package main

import (
	"strings"
	"testing"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
)

// validate says what a prefix source keys on, one line per source (a
// combine's parts included), after the summary; a bytes beyond the body
// limit is an error naming its line and field.
func TestValidatePrefixKey(t *testing.T) {
	good := ringlbtest.WriteConfig(t, "hash:\n  key:\n    - prefix: {bytes: 256}\n    - combine: [{prefix: 64}, {header: x-tenant}]\n  body_limit: 8192\n"+upstreamsYAML(2))
	code, out, errOut := runCmd(t, "validate", "-config", good)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "ok: 2 upstreams") ||
		!strings.HasPrefix(lines[1], "  hash.key[0] (prefix 256 bytes) keys on the body's model, then its messages up to and including the first whose role is user") ||
		!strings.Contains(lines[1], "cut at 256 bytes; read from the body's first 8192 bytes") ||
		!strings.HasPrefix(lines[2], "  hash.key[1].combine[0] (prefix 64 bytes) keys on") {
		t.Errorf("stdout:\n%s", out)
	}
	bad := ringlbtest.WriteConfig(t, "hash:\n  body_limit: 1024\n  key:\n    - prefix: {bytes: 4096}\n"+upstreamsYAML(2))
	code, out, errOut = runCmd(t, "validate", "-config", bad)
	if want := bad + ":4: hash.key[0].prefix.bytes: must be <= hash.body_limit (1024), got 4096"; code != exitFail || out != "" || !strings.Contains(errOut, want) {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d and %q", code, out, errOut, exitFail, want)
	}
}
