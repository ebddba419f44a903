package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// spliceBase has pools in several YAML styles: comments, blank lines,
// block and flow collections, a flow list over two lines.
const spliceBase = `# ringlb
listen: 127.0.0.1:8080
pools:
  a:
    # the first pool
    hash: {key: [{cookie: sid}]}
    upstreams:
      - {name: a1, url: http://127.0.0.1:9001}
      - name: a2
        url: http://127.0.0.1:9002
        weight: 2

  b:
    retries: 2
    upstreams: [{name: b1, url: http://127.0.0.1:9101},
                {name: b2, url: http://127.0.0.1:9102}]
  c:
    ring: {points_per_weight: 40}
    upstreams:
      - {name: c1, url: http://127.0.0.1:9201}
routes:
  - {path_prefix: /b, pool: b}
  - {path_prefix: /c, pool: c}
  - {pool: a}
`

// A file that changed inside one pool's text is loaded by parsing that
// text alone when it can be, and the result is always exactly Load's:
// the same config, or the same errors with the same lines. Each edit is
// tried on several layouts of the same config; splice says whether it is
// to be spliced (never in a file with an alias).
func TestLoaderSpliceAsLoad(t *testing.T) {
	cPool := "  c:\n    ring: {points_per_weight: 40}\n    upstreams:\n      - {name: c1, url: http://127.0.0.1:9201}\n"
	edits := []struct {
		name, old, new string
		splice         bool
	}{
		{"a weight", "weight: 2", "weight: 3", true},
		{"an upstream more in the last pool", "9201}\n", "9201}\n      - {name: c2, url: http://127.0.0.1:9202}\n", true},
		{"a pool renamed, lines added: the routes' lines move", "  a:\n    # the first pool\n", "  a2:\n    # the first pool\n    retries: 0\n\n", true},
		{"an error in a pool", "retries: 2", "retries: -1", true},
		{"a line removed", "weight: 2\n\n  b:", "weight: 2\n  b:", true},
		{"a comment inside a pool", "    retries: 2\n", "    # two\n    retries: 2\n", true},
		{"a comment on the key's line", "  b:\n", "  b: # the b pool\n", true},
		{"a block scalar", "    ring: {points_per_weight: 40}\n", "    ring: {points_per_weight: 40}\n    upstream_tls:\n      server_name: |\n        multi\n        line\n", true},
		{"a quoted scalar over two lines", "retries: 2", "retries: \"2\n      3\"", true},
		{"a pool that repeats another", "  c:\n", "  a:\n", true},
		{"a pool in flow style", cPool, "  c: {ring: {points_per_weight: 40}, upstreams: [{name: c1, url: http://127.0.0.1:9201}]}\n", true},
		{"a pool emptied", "  b:\n    retries: 2\n    upstreams: [{name: b1, url: http://127.0.0.1:9101},\n                {name: b2, url: http://127.0.0.1:9102}]\n", "  b:\n", true},
		{"a line dedented to the pool keys", "    retries: 2\n", "  retries: 2\n", false},
		{"a comment at column 1 in a pool", "    retries: 2\n", "# two\n    retries: 2\n", false},
		{"a tab", "    retries: 2\n", "\tretries: 2\n", false},
		{"an unclosed flow list", "9102}]", "9102}", false},
		{"an alias of nothing", "ring: {points_per_weight: 40}", "ring: *x", false},
		{"an anchor in one pool, its alias in another", "ring: {points_per_weight: 40}", "ring: &x {points_per_weight: 40}\n    retries: *x", false},
		{"the next key on the pool's last line", "9201}\nroutes:", "9201} routes:", false},
		{"a pool inserted", "  c:\n", "  d:\n    upstreams: [{name: d1, url: http://127.0.0.1:9301}]\n  c:\n", false},
		{"a pool removed", "  b:\n    retries: 2\n    upstreams: [{name: b1, url: http://127.0.0.1:9101},\n                {name: b2, url: http://127.0.0.1:9102}]\n", "", false},
		{"a second document", cPool, cPool + "---\nlisten: 127.0.0.1:1\n", false},
		{"a bare CR", "retries: 2\n", "retries: 2\r", false},
		{"a NEL", "9101}", "9101}\u0085", false},
		{"listen", "listen: 127.0.0.1:8080", "listen: 127.0.0.1:8081", false},
		{"a route", "  - {pool: a}", "  - {pool: c}", false},
	}
	layouts := []struct {
		name string
		of   func(string) string
	}{
		{"plain", func(s string) string { return s }},
		{"CRLF", func(s string) string { return strings.ReplaceAll(s, "\n", "\r\n") }},
		{"routes first", func(s string) string {
			i := strings.Index(s, "routes:\n")
			return s[:strings.Index(s, "pools:\n")] + s[i:] + s[strings.Index(s, "pools:\n"):i]
		}},
		{"no final line break", func(s string) string { return strings.TrimSuffix(s, "\n") }},
		{"indented by 4", func(s string) string {
			return strings.ReplaceAll(strings.ReplaceAll(s, "\n  ", "\n    "), "\n      ", "\n        ")
		}},
		{"an alias elsewhere", func(s string) string {
			return strings.Replace(s, "listen: 127.0.0.1:8080", "listen: 127.0.0.1:8080\nrequest_id_header: &h X-Req\nupstream_header: *h", 1)
		}},
	}
	path := filepath.Join(t.TempDir(), "c.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, lay := range layouts {
		for _, e := range edits {
			t.Run(lay.name+"/"+e.name, func(t *testing.T) {
				if !strings.Contains(spliceBase, e.old) {
					t.Fatalf("%q is not in the base", e.old)
				}
				base, edited := lay.of(spliceBase), lay.of(strings.Replace(spliceBase, e.old, e.new, 1))
				write(base)
				l := NewLoader(path, nil)
				if _, err := l.Load(); err != nil {
					t.Fatal(err)
				}
				write(edited)
				sameAsLoad(t, l, path)
				// (Moving the routes first moves the text of some edits.)
				if want := e.splice && lay.name != "an alias elsewhere"; l.spliced != want && lay.name != "routes first" {
					t.Errorf("spliced = %v, want %v", l.spliced, want)
				}
				// And back, from what the loader made of the edit if it
				// loaded.
				write(base)
				sameAsLoad(t, l, path)
			})
		}
	}
}

// Pool after pool changes, each reload splicing the tree the one before
// made.
func TestLoaderSpliceChain(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	src := spliceBase
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	l := NewLoader(path, nil)
	if _, err := l.Load(); err != nil {
		t.Fatal(err)
	}
	for i, e := range [][2]string{
		{"weight: 2", "weight: 3\n        protocol: http1"},
		{"retries: 2", "retries: 0\n    timeouts: {dial: 1s}"},
		{"9201}\n", "9201}\n      - {name: c2, url: http://127.0.0.1:9202}\n      - {name: c3, url: http://127.0.0.1:9203}\n"},
		{"  a:\n", "  a:\n    retries: 3\n"},
		{"weight: 3", "weight: 0"}, // rejected: the next splices from the last good tree
		{"timeouts: {dial: 1s}", "timeouts: {dial: 2s}"},
	} {
		src = strings.Replace(src, e[0], e[1], 1)
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		sameAsLoad(t, l, path)
		if !l.spliced {
			t.Errorf("edit %d was not spliced", i)
		}
		if i == 4 {
			src = strings.Replace(src, "weight: 0", "weight: 3", 1)
		}
	}
}

// FuzzLoaderSplice replaces n bytes at offset at of spliceBase with
// insert and checks that the loader, having loaded spliceBase, loads the
// result exactly as Load does.
func FuzzLoaderSplice(f *testing.F) {
	f.Add(uint16(strings.Index(spliceBase, "weight: 2")+8), uint8(1), "3")
	f.Add(uint16(strings.Index(spliceBase, "  c:")), uint8(0), "  d:\n    upstreams: []\n")
	f.Add(uint16(strings.Index(spliceBase, "9102}]")), uint8(6), "9102}")
	f.Add(uint16(strings.Index(spliceBase, "    retries")), uint8(4), "  ")
	f.Add(uint16(strings.Index(spliceBase, "retries: 2")+9), uint8(1), "\"2\n   3\"")
	f.Add(uint16(strings.Index(spliceBase, "    ring:")), uint8(0), "    # x\n  # y\n")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, at uint16, n uint8, insert string) {
		if int(at) > len(spliceBase) || int(at)+int(n) > len(spliceBase) || len(insert) > 200 {
			return
		}
		path := filepath.Join(dir, "c.yaml")
		if err := os.WriteFile(path, []byte(spliceBase), 0o600); err != nil {
			t.Fatal(err)
		}
		l := NewLoader(path, nil)
		if _, err := l.Load(); err != nil {
			t.Fatal(err)
		}
		edited := spliceBase[:at] + insert + spliceBase[int(at)+int(n):]
		if err := os.WriteFile(path, []byte(edited), 0o600); err != nil {
			t.Fatal(err)
		}
		sameAsLoad(t, l, path)
	})
}
