package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"net/textproto"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ringlb/ringlb/balancer/key"
	"gopkg.in/yaml.v3"
)

// The file is decoded into a yaml.Node and walked by hand, against a
// schema read from the struct tags of the types it decodes into (see
// schema.go), rather than with yaml.Decoder.KnownFields: custom
// UnmarshalYAML methods lose KnownFields (go-yaml issue 460), and walking
// the tree lets us report every problem, with its line and full field
// path, instead of stopping at the first.
//
// The decoder records the line of every field present in the file; a
// field's presence is what the defaults look at (absent fields only) and
// its line is where validation reports it. A field whose value has the
// wrong type is marked bad, and validation stays silent about it and
// everything under it, so one mistake gives one message.

// decoder collects problems for one file. Validation of a pool's blocks
// goes through a decoder scoped to the pool (see in): its field paths are
// relative (ring.placement) and mean the pool's (pools.NAME.ring.placement).
type decoder struct {
	*fileState
	prefix string // "" or the pool's path and a dot; prepended by has, isBad, lineOf and invalid
}

// fileState is what every decoder of one file shares.
type fileState struct {
	file    string
	rootPos pos
	lines   map[string]pos  // field path → position of its key (or sequence item)
	bad     map[string]bool // field paths whose value could not be decoded
	errs    Errors

	// prev is an earlier config of the file whose unchanged pools are
	// taken as they are (nil: none); reused names the pools taken, sums
	// holds every pool's fingerprint by name, and sumBuf is where they
	// are computed. known holds the fingerprints of the earlier load's
	// pools by the node of their value, nodeSums this load's. See reuse.
	prev     *Config
	reused   map[string]bool
	sums     map[string]poolSum
	sumBuf   []byte
	known    map[*yaml.Node]poolSum
	nodeSums map[*yaml.Node]poolSum
}

func newDecoder(file string) *decoder {
	return &decoder{fileState: &fileState{file: file, rootPos: pos{1, 1}, lines: map[string]pos{}, bad: map[string]bool{},
		reused: map[string]bool{}, sums: map[string]poolSum{}, nodeSums: map[*yaml.Node]poolSum{}}}
}

// in returns a decoder whose field paths are under path (a pool's, "" for
// the top level's).
func (d *decoder) in(path string) *decoder {
	if path == "" {
		return &decoder{fileState: d.fileState}
	}
	return &decoder{fileState: d.fileState, prefix: path + "."}
}

// pos is a position in the file; the column only orders problems that
// share a line.
type pos struct{ line, col int }

func nodePos(n *yaml.Node) pos { return pos{n.Line, n.Column} }

// errorAt records a problem at an explicit position.
func (d *decoder) errorAt(at pos, field, format string, args ...any) {
	d.errs = append(d.errs, &FieldError{File: d.file, Line: at.line, Field: field, Msg: fmt.Sprintf(format, args...), col: at.col})
}

// invalid records a validation problem with field, at the line of the field
// or, when it is absent, of its nearest present parent. It says nothing
// when the field or a parent of it failed to decode.
func (d *decoder) invalid(field, format string, args ...any) {
	if d.isBad(field) {
		return
	}
	d.errorAt(d.lineOf(field), d.prefix+field, format, args...)
}

// has reports whether field is present in the file.
func (d *decoder) has(field string) bool {
	_, ok := d.lines[d.prefix+field]
	return ok
}

func (d *decoder) lineOf(field string) pos {
	for p := d.prefix + field; p != ""; p = parent(p) {
		if l, ok := d.lines[p]; ok {
			return l
		}
	}
	return d.rootPos
}

func (d *decoder) isBad(field string) bool {
	for p := d.prefix + field; p != ""; p = parent(p) {
		if d.bad[p] {
			return true
		}
	}
	return false
}

// parent strips the last component of a field path:
// upstreams[1].weight → upstreams[1] → upstreams → "".
func parent(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

func join(p, key string) string {
	if p == "" {
		return key
	}
	return p + "." + key
}

func index(p string, i int) string { return p + "[" + strconv.Itoa(i) + "]" }

// typeErr records that field's value n is not of the wanted type.
func (d *decoder) typeErr(field string, n *yaml.Node, want string) {
	d.bad[field] = true
	d.errorAt(d.lineOrNode(field, n), field, "must be %s, got %s", want, describe(n))
}

// badValue records that field's value cannot be used, with a message.
func (d *decoder) badValue(field string, n *yaml.Node, format string, args ...any) {
	d.bad[field] = true
	d.errorAt(d.lineOrNode(field, n), field, format, args...)
}

func (d *decoder) lineOrNode(field string, n *yaml.Node) pos {
	if l, ok := d.lines[field]; ok {
		return l
	}
	if n != nil && n.Line > 0 {
		return nodePos(n)
	}
	return d.lineOf(field)
}

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// describe names a value for "got ..." in messages: strings quoted, other
// scalars as written, collections by kind.
func describe(n *yaml.Node) string {
	n = resolve(n)
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!int", "!!float", "!!bool":
			return short(n.Value)
		}
		return strconv.Quote(short(n.Value))
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	}
	return "an unsupported value"
}

// short truncates long values quoted in messages.
func short(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

// quoteKey renders a field name for a path; odd ones are quoted so a path
// is always one printable line.
func quoteKey(k string) string {
	for _, r := range k {
		if !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return strconv.Quote(short(k))
		}
	}
	if k == "" {
		return `""`
	}
	return k
}

// mapping walks mapping n at path p, calling value for each key fields
// knows and reporting unknown and repeated keys. It returns false when n
// is not a mapping.
func (d *decoder) mapping(p string, n *yaml.Node, fields map[string]*field, value func(f string, fd *field, v *yaml.Node)) bool {
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.typeErr(p, n, "a mapping")
		return false
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorAt(nodePos(k), p, "field names must be strings, got %s", describe(k))
			continue
		}
		if k.ShortTag() == "!!merge" {
			d.errorAt(nodePos(k), join(p, "<<"), "merge keys are not supported")
			continue
		}
		f := join(p, quoteKey(k.Value))
		fd, ok := fields[k.Value]
		if !ok {
			if s := suggest(k.Value, fields); s != "" {
				d.errorAt(nodePos(k), f, "unknown field (did you mean %s?)", s)
			} else {
				d.errorAt(nodePos(k), f, "unknown field")
			}
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorAt(nodePos(k), f, "repeated field (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		d.lines[f] = nodePos(k)
		value(f, fd, v)
	}
	return true
}

// sequence walks sequence n at path p, calling item for each entry with
// its path (p[i]). It returns false when n is not a sequence.
func (d *decoder) sequence(p string, n *yaml.Node, item func(i int, field string, v *yaml.Node)) bool {
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		d.typeErr(p, n, "a list")
		return false
	}
	for i, v := range n.Content {
		f := index(p, i)
		d.lines[f] = nodePos(v)
		item(i, f, v)
	}
	return true
}

func (d *decoder) str(f string, n *yaml.Node) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.typeErr(f, n, "a string")
		return "", false
	}
	return n.Value, true
}

func (d *decoder) integer(f string, n *yaml.Node) (int, bool) {
	n = resolve(n)
	var v int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		d.typeErr(f, n, "an integer")
		return 0, false
	}
	return v, true
}

func (d *decoder) number(f string, n *yaml.Node) (float64, bool) {
	n = resolve(n)
	var v float64
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!float") || n.Decode(&v) != nil {
		d.typeErr(f, n, "a number")
		return 0, false
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		d.typeErr(f, n, "a finite number")
		return 0, false
	}
	return v, true
}

func (d *decoder) boolean(f string, n *yaml.Node) (bool, bool) {
	n = resolve(n)
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		d.typeErr(f, n, "true or false")
		return false, false
	}
	return v, true
}

func (d *decoder) duration(f string, n *yaml.Node) (time.Duration, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.typeErr(f, n, "a duration like 2s")
		return 0, false
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		d.typeErr(f, n, "a duration like 2s")
		return 0, false
	}
	return v, true
}

// decode fills c from the root mapping. Absent fields stay zero; see
// applyDefaults.
func (d *decoder) decode(root *yaml.Node, c *Config) {
	d.block("", root, reflect.ValueOf(c).Elem())
}

// block decodes mapping n, the value of field f, into v, a struct: the
// value of each key its schema knows into its field.
func (d *decoder) block(f string, n *yaml.Node, v reflect.Value) {
	s := schemaOf(v.Type())
	d.mapping(f, n, s.byKey, func(f string, fd *field, n *yaml.Node) {
		d.value(f, n, v.FieldByIndex(fd.index), fd.how)
	})
	if b, ok := v.Addr().Interface().(interface{ decoded() }); ok {
		b.decoded()
	}
}

// durationType is the type of the fields decoded as durations.
var durationType = reflect.TypeFor[time.Duration]()

// value decodes n, the value of field f, into v, by v's type (how is the
// field's decode tag). A value of the wrong type is reported and leaves v
// zero; a list is an empty one, then gets an item for each entry (zero
// for one of the wrong type, except where custom says otherwise), and an
// optional block is allocated, then decoded as a block.
func (d *decoder) value(f string, n *yaml.Node, v reflect.Value, how string) {
	switch how {
	case "":
	case "path":
		if s, ok := d.path(f, n); ok {
			v.SetString(s)
		}
		return
	case "lower":
		if s, ok := d.str(f, n); ok {
			v.SetString(strings.ToLower(s))
		}
		return
	case "tls_version":
		if ver, ok := d.tlsVersion(f, n); ok {
			v.SetUint(uint64(ver))
		}
		return
	default:
		panic("config: " + f + ": unknown decode tag " + how)
	}
	if d.custom(f, n, v) {
		return
	}
	t := v.Type()
	switch k := t.Kind(); {
	case t == durationType:
		if x, ok := d.duration(f, n); ok {
			v.SetInt(int64(x))
		}
	case k == reflect.String:
		if x, ok := d.str(f, n); ok {
			v.SetString(x)
		}
	case k == reflect.Int:
		if x, ok := d.integer(f, n); ok {
			v.SetInt(int64(x))
		}
	case k == reflect.Float64:
		if x, ok := d.number(f, n); ok {
			v.SetFloat(x)
		}
	case k == reflect.Bool:
		if x, ok := d.boolean(f, n); ok {
			v.SetBool(x)
		}
	case k == reflect.Slice:
		v.Set(reflect.MakeSlice(t, 0, 0))
		d.sequence(f, n, func(i int, f string, n *yaml.Node) {
			v.Set(reflect.Append(v, reflect.Zero(t.Elem())))
			d.value(f, n, v.Index(i), "")
		})
	case k == reflect.Pointer && t.Elem().Kind() == reflect.Struct:
		v.Set(reflect.New(t.Elem()))
		d.block(f, n, v.Elem())
	case k == reflect.Struct:
		d.block(f, n, v)
	default:
		panic(fmt.Sprintf("config: %s: cannot decode a %s", f, t))
	}
}

// custom decodes n into v when v's type has a decoder of its own, and
// reports whether it did.
func (d *decoder) custom(f string, n *yaml.Node, v reflect.Value) bool {
	switch p := v.Addr().Interface().(type) {
	case *key.Source:
		*p = d.keySource(f, n)
	case **url.URL:
		d.upstreamURL(f, n, p)
	case *[]netip.Prefix:
		d.trustedProxies(f, n, p)
	case *StatusRange:
		r, ok := parseStatusRange(resolve(n))
		if !ok {
			d.typeErr(f, n, `a status like 200 or a range like "200-399"`)
			return true
		}
		*p = r
	case *AccessLog:
		d.accessLog(f, n, p)
	case *[]Pool:
		d.pools(f, n, p)
	default:
		return false
	}
	return true
}

// poolKeys are the names of a pool's blocks, sorted.
func poolKeys() []string {
	keys := slices.Collect(maps.Keys(schemaOf(reflect.TypeFor[Pool]()).byKey))
	slices.Sort(keys)
	return keys
}

// pools decodes the pools mapping: pool name → a pool's blocks, in file
// order. Names are checked by validation.
func (d *decoder) pools(f string, n *yaml.Node, pools *[]Pool) {
	*pools = []Pool{}
	n = resolve(n)
	if n.Kind != yaml.MappingNode {
		d.typeErr(f, n, "a mapping of pool names to pools, like `sessions: {upstreams: [...]}`")
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := resolve(n.Content[i]), n.Content[i+1]
		if k.Kind != yaml.ScalarNode || isNull(k) || k.ShortTag() == "!!merge" {
			d.errorAt(nodePos(k), f, "pool names must be strings, got %s", describe(k))
			continue
		}
		pf := join(f, quoteKey(k.Value))
		if first, dup := seen[k.Value]; dup {
			d.errorAt(nodePos(k), pf, "repeated pool (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		d.lines[pf] = nodePos(k)
		if d.reuse(k.Value, v, pools) {
			continue
		}
		p := &Pool{Name: k.Value}
		if !isNull(resolve(v)) { // an empty pool: validation says what it lacks
			d.block(pf, v, reflect.ValueOf(p).Elem())
		}
		*pools = append(*pools, *p)
	}
}

// poolPath is the field path of pools' entry name.
func poolPath(name string) string { return "pools." + quoteKey(name) }

// path decodes a file path; a relative one is taken from the config
// file's directory, so a config reads the same files whatever the working
// directory of the process reading it.
func (d *decoder) path(f string, n *yaml.Node) (string, bool) {
	s, ok := d.str(f, n)
	if !ok || s == "" || filepath.IsAbs(s) {
		return s, ok
	}
	return filepath.Join(filepath.Dir(d.file), s), true
}

// tlsVersion decodes tls.min_version: "1.2" or "1.3".
func (d *decoder) tlsVersion(f string, n *yaml.Node) (uint16, bool) {
	n = resolve(n)
	// Unquoted, 1.2 is a YAML float; its text is what counts.
	if n.Kind == yaml.ScalarNode && (n.ShortTag() == "!!str" || n.ShortTag() == "!!float") {
		switch n.Value {
		case "1.2":
			return tls.VersionTLS12, true
		case "1.3":
			return tls.VersionTLS13, true
		}
	}
	d.badValue(f, n, `must be "1.2" or "1.3", got %s`, describe(n))
	return 0, false
}

// trustedProxies decodes trusted_proxies: entries that are not a CIDR or an
// IP address are reported and left out.
func (d *decoder) trustedProxies(f string, n *yaml.Node, ps *[]netip.Prefix) {
	*ps = []netip.Prefix{}
	d.sequence(f, n, func(_ int, f string, n *yaml.Node) {
		s, ok := d.str(f, n)
		if !ok {
			return
		}
		p, ok := parsePrefix(s)
		if !ok {
			d.badValue(f, n, "must be a CIDR like 10.0.0.0/8 or an IP address, got %s", describe(n))
			return
		}
		*ps = append(*ps, p)
	})
}

// parsePrefix reads a CIDR (host bits are cleared: 10.1.2.3/8 is
// 10.0.0.0/8) or a bare IP address, which stands for itself (/32 or /128).
func parsePrefix(s string) (netip.Prefix, bool) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, false
		}
		return p.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, a.BitLen()), true
}

// keySourceKinds are the kinds of key source, for "did you mean".
var keySourceKinds = map[key.Kind]bool{
	key.URI: true, key.Path: true, key.IP: true, key.Host: true,
	key.Cookie: true, key.Header: true, key.Query: true, key.JSON: true,
	key.Combine: true,
}

const keySourceForm = "uri, path, ip, host, `cookie: NAME`, `header: NAME`, `query: NAME`, `json: PATH` or `combine: [SOURCE, ...]`"

// keySource decodes one hash.key entry: a bare uri, path, ip or host, a
// one-entry mapping cookie|header|query: NAME or json: PATH, or combine:
// a list of those. On failure it returns the zero key.Source (and f is
// marked bad, so validation skips it).
func (d *decoder) keySource(f string, n *yaml.Node) key.Source {
	return d.keySourceIn(f, n, true)
}

// keySourceIn decodes a key source; combine says it may be a combine (it
// is not one of a combine's parts).
func (d *decoder) keySourceIn(f string, n *yaml.Node, combine bool) key.Source {
	n = resolve(n)
	switch {
	case n.Kind == yaml.ScalarNode && !isNull(n):
		switch k := key.Kind(n.Value); k {
		case key.URI, key.Path, key.IP, key.Host:
			return key.Source{Kind: k}
		case key.Cookie, key.Header, key.Query:
			d.badValue(f, n, "%s needs a name, like `%s: NAME`", k, k)
			return key.Source{}
		case key.JSON:
			d.badValue(f, n, "json needs a field path, like `json: user` or `json: metadata.session`")
			return key.Source{}
		case key.Combine:
			d.badValue(f, n, "combine needs a list of sources, like `combine: [host, uri]`")
			return key.Source{}
		}
		d.badValue(f, n, "unknown key source %s%s; want %s", describe(n), didYouMean(n.Value, keySourceKinds), keySourceForm)
		return key.Source{}
	case n.Kind == yaml.MappingNode:
		if len(n.Content) != 2 {
			d.badValue(f, n, "must be one source per list item (%s), got a mapping with %d entries", keySourceForm, len(n.Content)/2)
			return key.Source{}
		}
		k, v := resolve(n.Content[0]), n.Content[1]
		if k.Kind != yaml.ScalarNode {
			d.badValue(f, n, "must be %s, got a mapping with key %s", keySourceForm, describe(k))
			return key.Source{}
		}
		kf := join(f, quoteKey(k.Value))
		switch kind := key.Kind(k.Value); kind {
		case key.Cookie, key.Header, key.Query, key.JSON:
			d.lines[kf] = nodePos(k)
			name, ok := d.str(kf, v)
			if !ok {
				d.bad[f] = true
				return key.Source{}
			}
			if kind == key.Header {
				name = textproto.CanonicalMIMEHeaderKey(name)
			}
			return key.Source{Kind: kind, Name: name}
		case key.Combine:
			d.lines[kf] = nodePos(k)
			if !combine {
				d.badValue(kf, k, "a combine cannot hold another combine; list its sources in the outer one")
				d.bad[f] = true
				return key.Source{}
			}
			src := key.Source{Kind: kind, Sources: []key.Source{}}
			ok := d.sequence(kf, v, func(_ int, f string, n *yaml.Node) {
				p := d.keySourceIn(f, n, false)
				if p.Kind == "" {
					d.bad[kf] = true
				}
				src.Sources = append(src.Sources, p)
			})
			if !ok || d.bad[kf] {
				d.bad[f] = true
				return key.Source{}
			}
			return src
		case key.URI, key.Path, key.IP, key.Host:
			d.badValue(kf, k, "takes no name; write `- %s`", kind)
			d.bad[f] = true
			return key.Source{}
		}
		d.badValue(f, k, "unknown key source %s%s; want %s", describe(k), didYouMean(k.Value, keySourceKinds), keySourceForm)
		return key.Source{}
	}
	d.typeErr(f, n, keySourceForm)
	return key.Source{}
}

// upstreamURL decodes upstreams[].url; see Upstream.decoded.
func (d *decoder) upstreamURL(f string, n *yaml.Node, u **url.URL) {
	s, ok := d.str(f, n)
	if !ok {
		return
	}
	p, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		d.badValue(f, n, "must be an absolute http:// or https:// URL, got %q: %v", short(redactURL(s)), err)
		return
	}
	*u = p
}

// decoded fills in what an upstream's fields give: Addr is the URL's host
// as written.
func (u *Upstream) decoded() {
	if u.URL != nil {
		u.Addr = u.URL.Host
	}
}

// parseStatusRange reads 200, "200" or "200-399". Bounds are checked by
// validation.
func parseStatusRange(n *yaml.Node) (StatusRange, bool) {
	if n.Kind != yaml.ScalarNode || (n.ShortTag() != "!!int" && n.ShortTag() != "!!str") {
		return StatusRange{}, false
	}
	lo, hi, isRange := strings.Cut(n.Value, "-")
	if !isRange {
		hi = lo
	}
	a, ok1 := statusCode(lo)
	b, ok2 := statusCode(hi)
	if !ok1 || !ok2 {
		return StatusRange{}, false
	}
	return StatusRange{Min: a, Max: b}, true
}

// statusCode reads 1 to 3 decimal digits, allowing spaces around them.
func statusCode(s string) (int, bool) {
	s = strings.TrimSpace(s)
	if len(s) == 0 || len(s) > 3 {
		return 0, false
	}
	v := 0
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}

// accessLog decodes access_log: true (format text), false (off), or a
// mapping {format, path}.
func (d *decoder) accessLog(f string, n *yaml.Node, a *AccessLog) {
	if r := resolve(n); r.Kind == yaml.ScalarNode {
		if on, ok := d.boolean(f, r); ok {
			*a = AccessLog{}
			if on {
				a.Format = "text"
			}
		}
		return
	}
	d.block(f, n, reflect.ValueOf(a).Elem())
}
