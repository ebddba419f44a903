package examples

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// markdownFiles returns every Markdown file of the repository.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(repoRoot, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 2 {
		t.Fatalf("found only %q", out)
	}
	return out
}

// goRunBackground matches a shell line that starts `go run` in the
// background.
var goRunBackground = regexp.MustCompile(`^\s*(?:\S+=\S+\s+)*go run\b[^#]*&\s*(?:#.*)?$`)

// TestNoGoRunInBackground: no document tells the user to start a program
// as `go run ... &`. The go tool ignores SIGINT and a SIGTERM ends it
// alone, leaving the program it started running and holding its ports.
func TestNoGoRunInBackground(t *testing.T) {
	for _, f := range markdownFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			if goRunBackground.MatchString(line) {
				t.Errorf("%s:%d starts `go run` in the background (build first, then run the binary): %s", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// upstreamProtocolRow matches a row of the README's table of upstream
// protocols: | `PROTOCOL` (default)? | SCHEMES | ... |
var upstreamProtocolRow = regexp.MustCompile("^\\| `([a-z0-9]+)`(?: \\(default\\))? \\| ([^|]+) \\|")

// TestREADMEUpstreamProtocolsMatchConfig: what the README says about the
// protocols ringlb speaks to upstreams is what the config accepts. Its
// table lists each upstreams[].protocol value with the URL schemes it
// takes; config.Load must accept exactly those pairs, the table must list
// every protocol the config knows, and no sentence may deny HTTP/2 to
// upstreams.
func TestREADMEUpstreamProtocolsMatchConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(data)
	_, table, ok := strings.Cut(readme, "Upstreams speak what their `protocol` says")
	if !ok {
		t.Fatal("README: no table of upstream protocols (\"Upstreams speak what their `protocol` says\")")
	}
	documented := map[string][]string{} // protocol → URL schemes
	for _, line := range strings.Split(table, "\n")[2:] {
		if !strings.HasPrefix(line, "|") {
			if len(documented) > 0 {
				break
			}
			continue
		}
		m := upstreamProtocolRow.FindStringSubmatch(line)
		if m == nil {
			continue // the header and the separator
		}
		for _, s := range []string{"http", "https"} {
			if strings.Contains(m[2], "`"+s+"`") {
				documented[m[1]] = append(documented[m[1]], s)
			}
		}
	}
	known := []string{config.ProtocolHTTP1, config.ProtocolH2C, config.ProtocolH2}
	for _, p := range known {
		if _, ok := documented[p]; !ok {
			t.Errorf("README's table of upstream protocols lacks %q, which the config accepts", p)
		}
	}
	for p, schemes := range documented {
		if !slices.Contains(known, p) {
			t.Errorf("README's table documents protocol %q, which the config does not know", p)
		}
		for _, scheme := range []string{"http", "https"} {
			src := "upstreams:\n  - name: a\n    url: " + scheme + "://127.0.0.1:9001\n    protocol: " + p + "\n"
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := config.Load(path)
			if want := slices.Contains(schemes, scheme); (err == nil) != want {
				t.Errorf("protocol %s with an %s URL: README says accepted=%v, config.Load says %v", p, scheme, want, err)
			}
		}
	}
	// The config schema has HTTP/2 upstreams: nothing may say otherwise.
	deny := regexp.MustCompile(`(?i)no HTTP/2 to upstreams|upstream connections are HTTP/1\.1`)
	for i, line := range strings.Split(readme, "\n") {
		if deny.MatchString(line) {
			t.Errorf("README.md:%d denies HTTP/2 to upstreams, which protocol h2c and h2 give: %s", i+1, line)
		}
	}
}

// everySeconds matches a stated check interval: "every 2 s", "every 2
// seconds", "within 10s".
var everySeconds = regexp.MustCompile(`(?i)\b(?:every|within) (\d+) ?(?:s|seconds)\b`)

// TestFileWatchIntervalsAgree: the README and config.yaml state how often
// files are looked at for changes on disk (the certificate pair, the
// config file) alike: every 2 seconds, what serve does.
func TestFileWatchIntervalsAgree(t *testing.T) {
	for _, f := range []string{"README.md", "config.yaml"} {
		data, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(data), "\n")
		found := 0
		for i, line := range lines {
			// A statement about a change on disk may wrap: look at the
			// line with its neighbours.
			window := strings.Join(lines[max(i-2, 0):min(i+3, len(lines))], " ")
			if !strings.Contains(window, "on disk") {
				continue
			}
			for _, m := range everySeconds.FindAllStringSubmatch(line, -1) {
				found++
				if m[1] != "2" {
					t.Errorf("%s:%d says files on disk are looked at %q; they are every 2 s: %s", f, i+1, m[0], strings.TrimSpace(line))
				}
			}
		}
		if found == 0 {
			t.Errorf("%s states no interval for noticing changes on disk", f)
		}
	}
}
