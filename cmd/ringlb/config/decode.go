package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/state"
	"github.com/ringlb/ringlb/balancer/transport"
	"gopkg.in/yaml.v3"
)

// The file is decoded into a yaml.Node and walked by hand, against a
// schema read from the struct tags of the types it decodes into (see
// schema.go), rather than with yaml.Decoder.KnownFields: custom
// UnmarshalYAML methods lose KnownFields (go-yaml issue 460), and walking
// the tree lets us report every problem, with its line and full field
// path, instead of stopping at the first.
//
// The decoder (decoder.go) records the line of every field present in
// the file; a field's presence is what the defaults look at (absent
// fields only) and its line is where validation reports it. A field whose
// value has the wrong type is marked bad, and validation stays silent
// about it and everything under it, so one mistake gives one message.

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
	if u, ok := v.Addr().Interface().(*Upstream); ok && u.URL != nil {
		u.Addr = u.URL.Host // as written: placement nginx's identity
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
	case k == reflect.Int || k == reflect.Int64:
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
	case *transport.Protocol: // upstreams[].protocol
		if s, ok := d.str(f, n); ok {
			var err error
			if *p, err = transport.ParseProtocol(s); err != nil {
				d.badValue(f, n, "must be http1, h2c or h2, got %q", short(s))
			}
		}
	case *state.Admin: // upstreams[].state
		if s, ok := d.str(f, n); ok {
			var err error
			if *p, err = state.Parse(s); err != nil {
				d.badValue(f, n, "must be ready, drain or maint, got %q", short(s))
			}
		}
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

// upstreamURL decodes upstreams[].url; block fills in the upstream's Addr.
func (d *decoder) upstreamURL(f string, n *yaml.Node, u **url.URL) {
	s, ok := d.str(f, n)
	if !ok {
		return
	}
	if hostWithoutScheme(s) {
		// 10.0.0.1:8080 would end in url.Parse's "first path segment in
		// URL cannot contain colon", app:8080 parse as scheme app.
		d.badValue(f, n, "%q has no scheme; write http://%s (or https://%s)", short(s), short(s), short(s))
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

// hostWithoutScheme reports whether s is a host or host:port written
// without its scheme ("10.0.0.1:8080", "app.internal:8080", "[::1]:80",
// "localhost"): no "://", and nothing a URL's path, query, fragment or
// user info would hold.
func hostWithoutScheme(s string) bool {
	return s != "" && !strings.Contains(s, "://") && !strings.ContainsAny(s, "/?#@ \t") && !strings.HasPrefix(s, ":")
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
