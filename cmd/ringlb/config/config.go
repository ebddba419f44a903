package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ringlb/ringlb/ring"
	"gopkg.in/yaml.v3"
)

// Load reads, decodes, defaults and validates the config file at path.
//
// On failure the error is an Errors listing every problem, one per line,
// each as "FILE:LINE: FIELD: message" with FILE the path as given, e.g.
//
//	config.yaml:14: upstreams[1].weight: must be > 0, got -2
//
// A file that cannot be read gives "FILE: cannot read: REASON" (and
// errors.Is(err, fs.ErrNotExist) holds for a missing one); an empty file, or
// one holding only comments, gives "FILE: empty config".
func Load(path string) (*Config, error) {
	data, err := readConfig(path)
	if err != nil {
		return nil, err
	}
	return Parse(path, data)
}

// readConfig reads the config file at path; a file that cannot be read is
// an Errors as Load describes.
func readConfig(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		reason := err
		var pe *fs.PathError
		if errors.As(err, &pe) {
			reason = pe.Err
		}
		return nil, Errors{{File: path, Msg: "cannot read: " + reason.Error(), err: err}}
	}
	return data, nil
}

// Parse decodes, defaults and validates a config held in data; file names it
// in errors and becomes Config.File, and relative paths in it are read from
// file's directory. Validation loads the files the config names (the tls
// certificate and key, the upstream_tls CA file) as serving would, so a
// file that cannot be read or parsed, or a key that does not match its
// certificate, is a problem of its field; an expired certificate is noted
// in Config.Expired. Errors are as for Load.
func Parse(file string, data []byte) (*Config, error) {
	c, err := parse(file, data, nil)
	return c, err
}

// parse is Parse of data, taking what it can from an earlier load of the
// file (none when e is nil), and noting in e what a later one can take.
func parse(file string, data []byte, e *earlier) (*Config, error) {
	d := newDecoder(file)
	if e == nil {
		e = &earlier{}
	}
	root := e.root
	if root == nil {
		var err error
		if root, err = d.root(data); err != nil {
			return nil, err
		}
	}
	d.rootPos = pos{max(root.Line, 1), root.Column}
	if e.prev != nil && e.prev.File == file {
		d.prev = e.prev
	}
	d.known = e.sums
	c := &Config{File: file}
	d.decode(root, c)
	applyDefaults(c, d.has, d.reused)
	d.validate(c)
	d.checkFiles(c, time.Now())
	if len(d.errs) > 0 {
		d.errs.sortByLine()
		return nil, d.errs
	}
	c.sums = d.keepSums(c)
	e.root, e.prev, e.sums = root, c, d.nodeSums
	return c, nil
}

// yamlLine matches the line yaml.v3 puts in its syntax errors. It and
// yamlAliasErr are compiled when a config first fails to parse: compiled
// at start, every process would keep them for the GC to mark.
var yamlLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^yaml: line (\d+): (.*)$`) })

// root parses data as one YAML document whose root is a mapping.
func (d *decoder) root(data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	err := dec.Decode(&doc)
	if err == io.EOF {
		return nil, Errors{{File: d.file, Msg: "empty config"}}
	}
	if err != nil {
		return nil, Errors{d.yamlError(err, data)}
	}
	if len(doc.Content) != 1 || isNull(doc.Content[0]) {
		return nil, Errors{{File: d.file, Msg: "empty config"}}
	}
	root := doc.Content[0]
	d.rootPos = pos{max(root.Line, 1), root.Column}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == io.EOF:
	case err != nil:
		return nil, Errors{d.yamlError(err, data)}
	default:
		return nil, Errors{{File: d.file, Line: extra.Line, Msg: "more than one YAML document; want exactly one"}}
	}
	if resolve(root).Kind != yaml.MappingNode {
		return nil, Errors{{File: d.file, Line: d.rootPos.line, Msg: "must be a mapping of fields like `listen: 127.0.0.1:8080`, got " + describe(root)}}
	}
	return root, nil
}

// yamlError turns a yaml.v3 syntax error into a FieldError. yaml.v3
// reports the line where the enclosing block or flow collection starts,
// not the line of the problem (and, for parser errors, one less than
// that), so the line is looked for: it is the first line at which the
// file's beginning, parsed alone, fails with the same message. If there is
// none, the message says "near line N" with yaml's line and the error has
// no line of its own. For the errors yaml reports without a line (bad
// bytes, an unknown alias, an unsupported %YAML version) the line is found
// in data; if it cannot be, the error has none.
func (d *decoder) yamlError(err error, data []byte) *FieldError {
	e := &FieldError{File: d.file, Msg: "invalid YAML: " + err.Error(), err: err}
	if m := yamlLine().FindStringSubmatch(err.Error()); m != nil {
		if line, err := strconv.Atoi(m[1]); err == nil {
			if found := firstFailingLine(data, m[2]); found > 0 {
				e.Line, e.Msg = found, "invalid YAML: "+m[2]
			} else {
				e.Msg = fmt.Sprintf("invalid YAML near line %d: %s", line, m[2])
			}
		}
	} else if s, ok := strings.CutPrefix(err.Error(), "yaml: "); ok {
		e.Msg = "invalid YAML: " + s
		e.Line = lineOfYAMLError(s, data)
	}
	return e
}

// maxRefineLines bounds the files whose syntax errors firstFailingLine
// refines: it parses up to one prefix per line.
const maxRefineLines = 5000

// firstFailingLine returns the smallest k such that the first k lines of
// data fail to parse as YAML with the message msg (yaml's error without
// its "yaml: line N: " prefix), or 0 when there is none.
func firstFailingLine(data []byte, msg string) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) > maxRefineLines {
		return 0
	}
	n := 0
	for k := 1; k <= len(lines); k++ {
		n += len(lines[k-1])
		err := parseAll(data[:n])
		if err == nil {
			continue
		}
		m := yamlLine().FindStringSubmatch(err.Error())
		if m != nil && m[2] == msg {
			return k
		}
	}
	return 0
}

// parseAll parses every YAML document in data and returns the first error.
func parseAll(data []byte) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
	}
}

// yamlAliasErr matches yaml.v3's error for an alias with no anchor,
// which it reports without a line.
var yamlAliasErr = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^unknown anchor '(.*)' referenced$`) })

// lineOfYAMLError finds the line of a yaml.v3 error reported without one
// (msg is the error without its "yaml: " prefix); 0 when it cannot.
// yaml.v3 leaves the line out of a syntax error when the line it would
// print is 0, which happens only on the first line; its reader's errors
// (bad bytes) and its alias errors carry no position at all, so the line
// is found in data.
func lineOfYAMLError(msg string, data []byte) int {
	switch {
	case msg == "control characters are not allowed", strings.Contains(msg, "UTF-8"), msg == "invalid Unicode character":
		// A reader error; else a scanner error (a %-escape in a tag) on line 1.
		if n := lineOfBadChar(data); n > 0 {
			return n
		}
		return 1
	case msg == "document contains excessive aliasing":
		return 0
	}
	m := yamlAliasErr().FindStringSubmatch(msg)
	if m == nil {
		return 1
	}
	// The alias *NAME, not followed by more of a name, outside comments
	// (from a # at the start or after a space); the first line if the
	// search fails.
	re := regexp.MustCompile(`\*` + regexp.QuoteMeta(m[1]) + `(?:[^A-Za-z0-9_-]|$)`)
	n := lineWhere(data, func(l string) bool {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			return false
		}
		if i := strings.Index(l, " #"); i >= 0 {
			l = l[:i]
		}
		return re.MatchString(l)
	})
	return max(n, 1)
}

// lineWhere returns the number of the first line of data that ok accepts, or 0.
func lineWhere(data []byte, ok func(string) bool) int {
	for i, l := range strings.Split(string(data), "\n") {
		if ok(strings.TrimSuffix(l, "\r")) {
			return i + 1
		}
	}
	return 0
}

// lineOfBadChar returns the line of the first character yaml.v3's reader
// refuses: invalid UTF-8 (surrogates and overlong forms included) or one
// outside YAML's printable set; 0 if there is none.
func lineOfBadChar(data []byte) int {
	line := 1
	for i := 0; i < len(data); {
		r, size := utf8.DecodeRune(data[i:])
		printable := r == 0x09 || r == 0x0A || r == 0x0D || (r >= 0x20 && r <= 0x7E) || r == 0x85 ||
			(r >= 0xA0 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
		if (r == utf8.RuneError && size <= 1) || !printable {
			return line
		}
		if r == '\n' {
			line++
		}
		i += size
	}
	return 0
}

// applyDefaults fills every field absent from the file (has(field) false)
// with its default, which the default tag on the field gives (see
// schema.go); present fields are kept as written, even when zero, so
// validation sees an explicit 0 or "" and can reject it. It is the only
// place defaults are set.
//
// The pools in reused were taken whole from an earlier config, defaults
// and all, and are left as they are.
func applyDefaults(c *Config, has func(field string) bool, reused map[string]bool) {
	fill("", reflect.ValueOf(c).Elem(), has)
	if c.Pools == nil {
		c.Pool.Name = DefaultPool
		fill("", reflect.ValueOf(&c.Pool).Elem(), has)
	}
	for i := range c.Pools {
		if reused[c.Pools[i].Name] {
			continue
		}
		p := poolPath(c.Pools[i].Name) + "."
		fill("", reflect.ValueOf(&c.Pools[i]).Elem(), func(f string) bool { return has(p + f) })
	}
}

// fill gives each field of block v (at path p) that the file does not have
// its default, and fills the blocks under it alike: the blocks, the
// optional blocks that are present and each entry of a list of blocks.
// It leaves the pools to applyDefaults, which fills each with its own
// paths, and a config's top-level pool: its fields are filled as a
// pool's, and only without pools.
func fill(p string, v reflect.Value, has func(field string) bool) {
	for _, f := range schemaOf(v.Type()).fields {
		if f.inline {
			continue
		}
		path, fv := join(p, f.key), v.FieldByIndex(f.index)
		if f.def.IsValid() && !has(path) {
			f.setDefault(fv)
		}
		switch t := fv.Type(); {
		case t.Kind() == reflect.Struct:
			fill(path, fv, has)
		case t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct && !fv.IsNil():
			fill(path, fv.Elem(), has)
		case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct && t != reflect.TypeFor[[]Pool]():
			for i := range fv.Len() {
				fill(index(path, i), fv.Index(i), has)
			}
		}
	}
}

// TotalPoints returns the number of points on the pool's ring: the sum of
// every static upstream's points.
func (p *Pool) TotalPoints() int {
	n := 0
	for _, u := range p.Upstreams {
		n += ring.PointsFor(p.Ring.PointsPerWeight, u.Weight)
	}
	return n
}

// Serving returns the pools a config serves: its pools in file order, or
// its one top-level pool (named DefaultPool) when it has none.
func (c *Config) Serving() []*Pool {
	if c.Pools == nil {
		return []*Pool{&c.Pool}
	}
	ps := make([]*Pool, len(c.Pools))
	for i := range c.Pools {
		ps[i] = &c.Pools[i]
	}
	return ps
}

// Summary describes a loaded config in one line, e.g.
// "config.yaml: ok: 4 upstreams, 640 points, placement ringlb" (see
// Pool.Summary); with pools, "config.yaml: ok: 2 pools (sessions,
// assets), 3 routes", each pool described by its own Summary. The command
// appends what config does not know, such as the ring version.
func (c *Config) Summary() string {
	if c.Pools == nil {
		return c.File + ": ok: " + c.Pool.Summary()
	}
	names := make([]string, len(c.Pools))
	for i := range c.Pools {
		names[i] = c.Pools[i].Name
	}
	return fmt.Sprintf("%s: ok: %s (%s), %s", c.File, plural(len(c.Pools), "pool"), strings.Join(names, ", "), plural(len(c.Routes), "route"))
}

// Summary describes a pool, e.g. "4 upstreams, 640 points, placement
// ringlb", and with a discovery block "0 upstreams, 0 points, placement
// ringlb, discovery every 5s from srv _http._tcp.app.example, host
// cache.example:8080" (nothing is resolved: the points are the static
// upstreams'); with hold on it ends in e.g. ", hold idle 10m0s max_keys
// 1000000, cookie ringlb_hold (2 secrets)", never printing a secret.
func (p *Pool) Summary() string {
	return fmt.Sprintf("%s, %d points, placement %s%s%s",
		plural(len(p.Upstreams), "upstream"), p.TotalPoints(), p.Ring.Placement,
		p.Discovery.summary(), p.Hold.summary())
}

// summary describes the hold block for Summary: "" when hold is off.
func (h Hold) summary() string {
	if !h.On() {
		return ""
	}
	s := fmt.Sprintf(", hold idle %s max_keys %d", h.Idle, h.MaxKeys)
	if h.Cookie.Name != "" {
		s += fmt.Sprintf(", cookie %s (%s)", h.Cookie.Name, plural(len(h.Cookie.Secrets), "secret"))
	}
	if h.Share.Redis != "" {
		s += ", shared through " + redactURL(h.Share.Redis)
	}
	return s
}

// summary describes the discovery block for Summary: "" when it is absent.
func (disc *Discovery) summary() string {
	if disc == nil {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, ", discovery every %s from ", disc.Interval)
	for i, s := range disc.Sources {
		if i > 0 {
			b.WriteString(", ")
		}
		if s.SRV != "" {
			b.WriteString("srv " + s.SRV)
		} else if s.Kubernetes != nil {
			b.WriteString(s.kube(disc.Kubeconfig).String())
		} else {
			b.WriteString("host " + net.JoinHostPort(s.Host, strconv.Itoa(s.Port)))
		}
	}
	return b.String()
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
