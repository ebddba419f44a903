package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/internal/testutil/certstest"
)

// reuseBase is a config of three pools: a and c name no file, b names
// a CA file (ca.pem beside the config) and a hold secret file.
const reuseBase = `listen: 127.0.0.1:8080
pools:
  a:
    hash: {key: [{cookie: sid}]}
    upstreams:
      - {name: a1, url: http://127.0.0.1:9001}
      - {name: a2, url: http://127.0.0.1:9002, weight: 2}
  b:
    upstream_tls: {ca_file: ca.pem}
    hold: {idle: 5m, cookie: {name: ringlb_hold, secret_file: secret}}
    upstreams:
      - {name: b1, url: https://127.0.0.1:9101}
  c:
    ring: {points_per_weight: 40}
    upstreams:
      - {name: c1, url: http://127.0.0.1:9201}
      - {name: c2, url: http://127.0.0.1:9202}
routes:
  - {path_prefix: /b, pool: b}
  - {path_prefix: /c, pool: c}
  - {pool: a}
`

// startLoader writes reuseBase and the files it names into a new
// directory and loads it; it returns the config's path, a function
// writing a file beside it, the config and a Loader that has it.
func startLoader(t *testing.T) (string, func(name, data string), *Config, *Loader) {
	t.Helper()
	dir := t.TempDir()
	certstest.NewCA(t).WriteCA(t, dir, "ca.pem")
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("secret", strings.Repeat("s", 32)+"\n")
	path := filepath.Join(dir, "c.yaml")
	write("c.yaml", reuseBase)
	first, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, write, first, NewLoader(path, first)
}

// sameAsLoad checks that what the loader gives for the file as it is now
// is exactly what Load gives: the same config or the same error.
func sameAsLoad(t *testing.T, l *Loader, path string) *Config {
	t.Helper()
	got, gotErr := l.Load()
	want, wantErr := Load(path)
	switch {
	case (gotErr == nil) != (wantErr == nil):
		t.Fatalf("Loader.Load: %v\nLoad: %v", gotErr, wantErr)
	case gotErr != nil:
		if gotErr.Error() != wantErr.Error() {
			t.Errorf("Loader.Load error:\n%v\nLoad error:\n%v", gotErr, wantErr)
		}
	case !reflect.DeepEqual(got, want):
		t.Errorf("Loader.Load:\n%+v\nLoad:\n%+v", got, want)
	}
	return got
}

// A reload that changes one pool decodes that pool again and takes the
// unchanged ones from the last load; the result is what Load gives.
func TestLoaderReusesUnchangedPools(t *testing.T) {
	path, write, first, l := startLoader(t)
	// a's weight changes, and a comment and blank lines move c down: c
	// is still the same pool.
	write("c.yaml", strings.Replace(strings.Replace(reuseBase, "weight: 2", "weight: 3", 1), "  c:\n", "\n  # the c pool\n\n  c:\n", 1))
	next := sameAsLoad(t, l, path)
	if next == nil {
		t.FailNow()
	}
	if next.Pools[0].Upstreams[1].Weight != 3 || &next.Pools[0].Upstreams[0] == &first.Pools[0].Upstreams[0] {
		t.Errorf("pool a was not decoded again: weight %g", next.Pools[0].Upstreams[1].Weight)
	}
	if &next.Pools[2].Upstreams[0] != &first.Pools[2].Upstreams[0] {
		t.Error("pool c, unchanged, was decoded again")
	}
	if &next.Pools[1].Upstreams[0] == &first.Pools[1].Upstreams[0] {
		t.Error("pool b, which names files, was taken from the last load")
	}
	for _, tt := range []struct {
		pool string
		same bool
	}{{"a", false}, {"b", false}, {"c", true}, {"d", false}} {
		if got := next.SamePool(first, tt.pool); got != tt.same {
			t.Errorf("SamePool(first, %s) = %v, want %v", tt.pool, got, tt.same)
		}
	}
	if other, err := Parse(filepath.Join(filepath.Dir(path), "other.yaml"), []byte(reuseBase)); err != nil || next.SamePool(other, "c") {
		t.Error("SamePool holds across files")
	}
	if next.SamePool(nil, "c") {
		t.Error("SamePool(nil) holds")
	}
}

// Every problem of a file is reported as Load reports it, with its line,
// whatever the loader took from the last load; a reload after a failed
// one works; a file that did not change is checked again, files and all.
func TestLoaderErrorsAsLoad(t *testing.T) {
	path, write, _, l := startLoader(t)
	dir := filepath.Dir(path)
	poolA := reuseBase[strings.Index(reuseBase, "  a:\n"):strings.Index(reuseBase, "  b:\n")]
	for _, tt := range []struct {
		name, src string
		files     map[string]string // written before the load
		want      string            // a part of the error
	}{
		{"a pool before the unchanged ones has an error", strings.Replace(reuseBase, "pools:\n", "pools:\n  z:\n    upstreams: [{name: z, url: http://127.0.0.1:1, weight: -1}]\n", 1) + "  - {path_prefix: /z, pool: z}\n",
			nil, "c.yaml:4: pools.z.upstreams[0].weight: must be > 0, got -1"},
		{"an unchanged pool no route reaches", strings.Replace(reuseBase, "  - {path_prefix: /c, pool: c}\n", "", 1),
			nil, `c.yaml:13: pools.c: no route reaches pool "c": add a route with pool: c`},
		{"an unchanged pool twice", strings.Replace(reuseBase, "routes:", poolA+"routes:", 1),
			nil, "c.yaml:18: pools.a: repeated pool (first at line 3)"},
		{"a pool block at the top level", "retries: 2\n" + reuseBase,
			nil, "c.yaml:1: retries: must be inside a pool when the config has pools"},
		{"unchanged text, CA file broken", reuseBase,
			map[string]string{"ca.pem": "not a certificate\n"}, "c.yaml:9: pools.b.upstream_tls.ca_file: "},
		{"unchanged text, secret file too short", reuseBase,
			map[string]string{"ca.pem": "", "secret": "short\n"}, "c.yaml:10: pools.b.hold.cookie.secret_file: "},
		{"a syntax error", reuseBase + "  - {pool: a\n",
			nil, "invalid YAML"},
		{"an empty file", "", nil, "c.yaml: empty config"},
		{"the unchanged pools under another listen of the same port", strings.Replace(reuseBase, "listen: 127.0.0.1:8080", "listen: 127.0.0.1:8080\nadmin_listen: 127.0.0.1:8080", 1),
			nil, "c.yaml:2: admin_listen: overlaps listen"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, ok := tt.files["ca.pem"]; ok {
				defer certstest.NewCA(t).WriteCA(t, dir, "ca.pem")
			}
			for name, data := range tt.files {
				if data != "" {
					write(name, data)
				}
			}
			if _, ok := tt.files["secret"]; ok {
				defer write("secret", strings.Repeat("s", 32)+"\n")
			}
			write("c.yaml", tt.src)
			if c := sameAsLoad(t, l, path); c != nil {
				t.Fatalf("loaded, want an error with %q", tt.want)
			}
			if _, err := l.Load(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error:\n%v\nwant a line with %q", err, tt.want)
			}
		})
		// Back to a good file that changes pool a: it loads, and pool c
		// is the last good load's.
		write("c.yaml", strings.Replace(reuseBase, "weight: 2", "weight: 5", 1))
		c := sameAsLoad(t, l, path)
		if c == nil || c.Pools[0].Upstreams[1].Weight != 5 {
			t.Fatalf("after %s: the reload to a good file did not apply", tt.name)
		}
		write("c.yaml", reuseBase)
		sameAsLoad(t, l, path)
	}
}

// A file whose bytes did not change is not parsed again, but is checked
// as Load checks it.
func TestLoaderSameBytes(t *testing.T) {
	path, write, _, _ := startLoader(t)
	l := NewLoader(path, nil)
	c1 := sameAsLoad(t, l, path)
	root := l.base.root
	c2 := sameAsLoad(t, l, path)
	if l.base.root != root || c2 == nil || c1 == nil {
		t.Fatal("the same bytes were parsed again")
	}
	for _, name := range []string{"a", "c"} {
		if !c2.SamePool(c1, name) {
			t.Errorf("SamePool(%s) = false for the same file", name)
		}
	}
	write("ca.pem", "not a certificate\n")
	if _, err := l.Load(); err == nil || !strings.Contains(err.Error(), "c.yaml:9: pools.b.upstream_tls.ca_file: ") {
		t.Errorf("an unchanged file naming a broken CA file loaded: %v", err)
	}
}

// A pool naming hash.salt_file is decoded again on every load, so a new
// salt in an unchanged config is read (as the other files are).
func TestLoaderReadsSaltAgain(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	src := strings.Replace(strings.Replace(reuseBase, "    ring: {points_per_weight: 40}\n", "    ring: {points_per_weight: 40}\n    hash: {key: [ip], salt_file: salt}\n", 1),
		"    upstream_tls: {ca_file: ca.pem}\n", "", 1)
	src = strings.Replace(src, "    hold: {idle: 5m, cookie: {name: ringlb_hold, secret_file: secret}}\n", "", 1)
	src = strings.Replace(src, "https://127.0.0.1:9101", "http://127.0.0.1:9101", 1)
	write("salt", "the-first-salt-0123\n")
	path := filepath.Join(dir, "c.yaml")
	write("c.yaml", src)
	first, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLoader(path, first)
	write("salt", "the-second-salt-456\n")
	next := sameAsLoad(t, l, path)
	if next == nil || string(next.Pools[2].Hash.Salt) != "the-second-salt-456" || next.SamePool(first, "c") {
		t.Errorf("after the salt changed: pool c's salt %q", next.Pools[2].Hash.Salt)
	}
	if !next.SamePool(first, "a") || !next.SamePool(first, "b") {
		t.Error("pools naming no file were decoded again")
	}
}
