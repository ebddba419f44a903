package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/ringlb/ringlb/ring"
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
	top := v.Type() == reflect.TypeFor[Config]()
	for _, f := range schemaOf(v.Type()).fields {
		if f.inline && top {
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
		discoverySummary(p.Discovery), holdSummary(p.Hold))
}

// holdSummary describes the hold block for Summary: "" when hold is off.
func holdSummary(h Hold) string {
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

// discoverySummary describes the discovery block for Summary: "" when it
// is absent.
func discoverySummary(disc *Discovery) string {
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
		} else if s.Kubernetes.Service != "" {
			b.WriteString(kubeName(s, disc.Kubeconfig))
		} else {
			b.WriteString("host " + net.JoinHostPort(s.Host, strconv.Itoa(s.Port)))
		}
	}
	return b.String()
}

// plural is n and what, with an s unless n is 1: "1 pool", "2 pools".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
