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

// upstreamProtocolRow matches a row of the protocols page's table of upstream
// protocols: | `PROTOCOL` (default)? | SCHEMES | ... |
var upstreamProtocolRow = regexp.MustCompile("^\\| `([a-z0-9]+)`(?: \\(default\\))? \\| ([^|]+) \\|")

// TestDocsUpstreamProtocolsMatchConfig: what docs/protocols.md says about
// the protocols ringlb speaks to upstreams is what the config accepts. Its
// table lists each upstreams[].protocol value with the URL schemes it
// takes; config.Load must accept exactly those pairs, the table must list
// every protocol the config knows, and no sentence of any document may
// deny HTTP/2 to upstreams.
func TestDocsUpstreamProtocolsMatchConfig(t *testing.T) {
	const page = "docs/protocols.md"
	data, err := os.ReadFile(filepath.Join(repoRoot, page))
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "Upstreams speak what their `protocol` says")
	if !ok {
		t.Fatal(page + ": no table of upstream protocols (\"Upstreams speak what their `protocol` says\")")
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
			t.Errorf("%s: the table of upstream protocols lacks %q, which the config accepts", page, p)
		}
	}
	for p, schemes := range documented {
		if !slices.Contains(known, p) {
			t.Errorf("%s: the table documents protocol %q, which the config does not know", page, p)
		}
		for _, scheme := range []string{"http", "https"} {
			src := "upstreams:\n  - name: a\n    url: " + scheme + "://127.0.0.1:9001\n    protocol: " + p + "\n"
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := config.Load(path)
			if want := slices.Contains(schemes, scheme); (err == nil) != want {
				t.Errorf("protocol %s with an %s URL: %s says accepted=%v, config.Load says %v", p, scheme, page, want, err)
			}
		}
	}
	// The config schema has HTTP/2 upstreams: nothing may say otherwise.
	deny := regexp.MustCompile(`(?i)no HTTP/2 to upstreams|upstream connections are HTTP/1\.1`)
	for _, f := range markdownFiles(t) {
		for i, line := range strings.Split(string(must(os.ReadFile(f))), "\n") {
			if deny.MatchString(line) {
				t.Errorf("%s:%d denies HTTP/2 to upstreams, which protocol h2c and h2 give: %s", f, i+1, line)
			}
		}
	}
}

// everySeconds matches a stated check interval: "every 2 s", "every 2
// seconds", "within 10s".
var everySeconds = regexp.MustCompile(`(?i)\b(?:every|within) (\d+) ?(?:s|seconds)\b`)

// TestFileWatchIntervalsAgree: every document and config.yaml state how
// often files are looked at for changes on disk (the certificate pair, the
// config file) alike: every 2 seconds, what serve does. The pages that
// describe the watch (and config.yaml) must state it.
func TestFileWatchIntervalsAgree(t *testing.T) {
	states := map[string]bool{"config.yaml": true, "docs/operations.md": true, "docs/protocols.md": true}
	files := []string{"config.yaml"}
	for _, f := range markdownFiles(t) {
		rel, err := filepath.Rel(repoRoot, f)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	seen := map[string]bool{}
	for _, f := range files {
		seen[f] = true
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
		if found == 0 && states[f] {
			t.Errorf("%s states no interval for noticing changes on disk", f)
		}
	}
	for f := range states {
		if !seen[f] {
			t.Errorf("%s: not found", f)
		}
	}
}

// scriptDocs names the page that quotes each example script's output.
var scriptDocs = map[string]string{
	"churn.sh":           "docs/routing.md",
	"hold.sh":            "docs/routing.md",
	"hold-shared.sh":     "docs/routing.md",
	"rolling-restart.sh": "docs/routing.md",
	"handoff.sh":         "docs/routing.md",
}

// scriptQuote returns the page that quotes script's output and the quoted
// lines: the first code block after "`bash examples/SCRIPT`".
func scriptQuote(t *testing.T, script string) (page, quoted string) {
	t.Helper()
	page = scriptDocs[script]
	if page == "" {
		t.Fatalf("scriptDocs names no page for %s", script)
	}
	data := must(os.ReadFile(filepath.Join(repoRoot, page)))
	m := regexp.MustCompile("(?s)`bash examples/" + regexp.QuoteMeta(script) + "`.*?\n```\n(.*?)```").FindSubmatch(data)
	if m == nil {
		t.Fatalf("%s quotes no %s output", page, script)
	}
	return page, string(m[1])
}

// TestScriptQuotesPresent: each page scriptDocs names quotes its script's
// output (what the script tests check against a real run).
func TestScriptQuotesPresent(t *testing.T) {
	for script := range scriptDocs {
		if _, err := os.Stat(script); err != nil {
			t.Errorf("scriptDocs names %s: %v", script, err)
		}
		if _, q := scriptQuote(t, script); strings.TrimSpace(q) == "" {
			t.Errorf("the quote of %s is empty", script)
		}
	}
}

// mdLink matches a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// headingSlug is GitHub's anchor for a heading: lower case, punctuation
// but - and _ dropped, spaces as -.
func headingSlug(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	h = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`).ReplaceAllString(h, "")
	return strings.ReplaceAll(h, " ", "-")
}

// anchors returns the anchors of a Markdown file's headings.
func anchors(data string) map[string]bool {
	out := map[string]bool{}
	fence := false
	for _, line := range strings.Split(data, "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
			continue
		}
		if m := regexp.MustCompile(`^#{1,6} (.*)`).FindStringSubmatch(line); m != nil && !fence {
			out[headingSlug(m[1])] = true
		}
	}
	return out
}

// TestDocsLinks: every relative link of every document reaches a file of
// the repository, and every #anchor a heading of its page.
func TestDocsLinks(t *testing.T) {
	for _, f := range markdownFiles(t) {
		data := string(must(os.ReadFile(f)))
		// Code spans and blocks hold no links.
		text := regexp.MustCompile("(?s)```.*?```|`[^`\n]*`").ReplaceAllString(data, "")
		for _, m := range mdLink.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := f
			if file != "" {
				path = filepath.Join(filepath.Dir(f), file)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s links to %s: %v", f, target, err)
					continue
				}
			}
			if anchor != "" && strings.HasSuffix(path, ".md") && !anchors(string(must(os.ReadFile(path))))[anchor] {
				t.Errorf("%s links to %s: %s has no heading #%s", f, target, path, anchor)
			}
		}
	}
}

// TestFrontPageLinksEveryPage: README.md, the front page, links to every
// page of docs/, so each is found from it, and stays a front page.
func TestFrontPageLinksEveryPage(t *testing.T) {
	readme := string(must(os.ReadFile(filepath.Join(repoRoot, "README.md"))))
	pages, err := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	if err != nil || len(pages) < 8 {
		t.Fatalf("docs/: %d pages (%v)", len(pages), err)
	}
	for _, p := range pages {
		if !strings.Contains(readme, "](docs/"+filepath.Base(p)) {
			t.Errorf("README.md does not link to docs/%s", filepath.Base(p))
		}
	}
	if !regexp.MustCompile(`(?m)^## Contents$`).MatchString(readme) {
		t.Error("README.md has no table of contents (## Contents)")
	}
	if n := strings.Count(readme, "\n"); n > 250 {
		t.Errorf("README.md is %d lines: the reference belongs in docs/", n)
	}
}

// quickStart returns the commands of the README's quick start: the lines
// of its first sh block, comments cut.
func quickStart(t *testing.T) []string {
	t.Helper()
	readme := string(must(os.ReadFile(filepath.Join(repoRoot, "README.md"))))
	m := regexp.MustCompile("(?s)## Quick start\n.*?```sh\n(.*?)```").FindStringSubmatch(readme)
	if m == nil {
		t.Fatal("README.md: no sh block under ## Quick start")
	}
	var cmds []string
	for _, line := range strings.Split(m[1], "\n") {
		line, _, _ = strings.Cut(line, "#")
		if line = strings.TrimSpace(line); line != "" {
			cmds = append(cmds, line)
		}
	}
	return cmds
}

// TestQuickStartCommands: the quick start gives the demo and the test
// command, and .ci/run runs exactly that test command.
func TestQuickStartCommands(t *testing.T) {
	cmds := quickStart(t)
	if !slices.Contains(cmds, "go run ./cmd/ringlb demo") {
		t.Errorf("the quick start lacks `go run ./cmd/ringlb demo`: %q", cmds)
	}
	var test string
	for _, c := range cmds {
		if strings.HasPrefix(c, "go test ") {
			test = c
		}
	}
	if test == "" {
		t.Fatalf("the quick start gives no test command: %q", cmds)
	}
	ci := string(must(os.ReadFile(filepath.Join(repoRoot, ".ci", "run"))))
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(test) + `$`).MatchString(ci) {
		t.Errorf(".ci/run does not run the quick start's test command %q", test)
	}
}

// builtCommand matches a command line in a code block that runs ringlb as
// if installed on PATH ("ringlb validate x.yaml", "$ ringlb simulate
// -add ..."), not a synopsis (which shows [flags]).
var builtCommand = regexp.MustCompile(`^\s*(?:\$ )?ringlb (?:serve|validate|simulate|demo|version) (?:-|\S+\.ya?ml)[^\[]*$`)

// TestDocsCommandsAsBuilt: the documents write commands the way the quick
// start builds ringlb (go build -o ringlb ./cmd/ringlb, then ./ringlb
// ...): no `go run ./cmd/ringlb SUBCOMMAND` but the quick start's demo,
// and no bare `ringlb ...` command lines in code blocks.
func TestDocsCommandsAsBuilt(t *testing.T) {
	for _, f := range markdownFiles(t) {
		readme := filepath.Base(f) == "README.md" && filepath.Dir(f) == repoRoot
		fence := false
		for i, line := range strings.Split(string(must(os.ReadFile(f))), "\n") {
			if strings.HasPrefix(line, "```") {
				fence = !fence
				continue
			}
			for _, m := range regexp.MustCompile(`go run \./cmd/ringlb(?: \S+)?`).FindAllString(line, -1) {
				if m != "go run ./cmd/ringlb ..." && !(readme && m == "go run ./cmd/ringlb demo") { // "..." : a warning against it
					t.Errorf("%s:%d: %q: build first (go build -o ringlb ./cmd/ringlb), then ./ringlb ...", f, i+1, m)
				}
			}
			if fence && builtCommand.MatchString(line) {
				t.Errorf("%s:%d: %q: write ./ringlb, as the quick start builds it", f, i+1, strings.TrimSpace(line))
			}
		}
	}
}
