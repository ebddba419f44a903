package config

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"

	"gopkg.in/yaml.v3"
)

// Reloading a config of many pools in which one pool changed need not
// decode and validate the others again: a pool is the same as before when
// its YAML is (sumPool), it names no file, which may have changed on disk
// since (namesFiles), and it is the same file. Such a pool is taken from
// the previous config whole; everything else (the top level, the routes,
// the checks across pools, the files) is decoded and checked as always.
// A pool taken so was valid in a config that loaded, and a pool's own
// checks read only its blocks, so it would give no problem now either.

// poolSum is a pool's fingerprint: SHA-256 of the content of its YAML
// subtree (kinds, resolved tags, values and their order), not of its
// layout, style, comments or lines, none of which changes what it decodes
// to.
type poolSum [sha256.Size]byte

// sumPool returns the fingerprint of the pool whose value is n; false when
// the subtree holds an alias (such a pool is never reused). A node of the
// earlier load's tree (which a Loader keeps where the file did not
// change) has the fingerprint it had.
func (d *decoder) sumPool(n *yaml.Node) (poolSum, bool) {
	sum, ok := d.known[n]
	if !ok {
		d.sumBuf = d.sumBuf[:0]
		if !d.sumNode(n) {
			return poolSum{}, false
		}
		sum = sha256.Sum256(d.sumBuf)
	}
	d.nodeSums[n] = sum
	return sum, true
}

func (d *decoder) sumNode(n *yaml.Node) bool {
	if n.Kind == yaml.AliasNode {
		return false
	}
	b := append(d.sumBuf, byte(n.Kind))
	b = appendString(b, n.ShortTag())
	b = appendString(b, n.Value)
	d.sumBuf = binary.AppendUvarint(b, uint64(len(n.Content)))
	for _, c := range n.Content {
		if !d.sumNode(c) {
			return false
		}
	}
	return true
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// reuse appends the pool name, whose value is n, from the previous config
// to pools when it is unchanged there; it reports whether it did. It notes
// the pool's fingerprint either way.
func (d *decoder) reuse(name string, n *yaml.Node, pools *[]Pool) bool {
	sum, ok := d.sumPool(n)
	if !ok {
		return false
	}
	d.sums[name] = sum
	if d.prev == nil {
		return false
	}
	if old, ok := d.prev.sums[name]; !ok || old != sum {
		return false
	}
	for i := range d.prev.Pools {
		if p := &d.prev.Pools[i]; p.Name == name {
			*pools = append(*pools, *p)
			d.reused[name] = true
			return true
		}
	}
	return false
}

// keepSums returns the fingerprints of c's pools that a later load may
// reuse: those that name no file. Nil without pools.
func (d *decoder) keepSums(c *Config) map[string]poolSum {
	if c.Pools == nil {
		return nil
	}
	sums := make(map[string]poolSum, len(c.Pools))
	for i := range c.Pools {
		p := &c.Pools[i]
		if s, ok := d.sums[p.Name]; ok && !p.namesFiles() {
			sums[p.Name] = s
		}
	}
	return sums
}

// namesFiles reports whether the pool names a file that validation or
// serving reads (its content can change while the config does not).
func (p *Pool) namesFiles() bool {
	return p.UpstreamTLS.CAFile != "" || p.Hash.SaltFile != "" || p.Hold.Cookie.SecretFile != "" || p.Hold.Share.PasswordFile != "" ||
		(p.Discovery != nil && p.Discovery.Kubeconfig != "")
}

// SamePool reports whether pool name is, as decoded, the same in c and in
// old, two configs of one file with pools: its blocks are the same YAML
// (layout, comments and lines aside) and name no file, which might have
// changed on disk in between. Whatever is built from that pool alone is
// then the same too.
func (c *Config) SamePool(old *Config, name string) bool {
	if old == nil || c.File != old.File {
		return false
	}
	s, ok := c.sums[name]
	o, oldOK := old.sums[name]
	return ok && oldOK && s == o
}

// A Loader loads one config file again and again, as serve's reloads do,
// and returns what Load would, but faster when little changed since the
// last load that succeeded: a file whose bytes are the same is not parsed
// again (its YAML tree is kept), one that changed only inside one pool
// has only that pool's text parsed (see splice), and pools that are the
// same (see SamePool) are taken from that config instead of being decoded
// and validated again. The top level, the routes and every file the
// config names are read and checked each time. A Loader is not safe for
// concurrent use.
type Loader struct {
	path string
	// last is what the last load that succeeded leaves to the next: its
	// config (nil: none), tree and pools' fingerprints; base is its file.
	last    earlier
	base    *layout // nil: unknown
	spliced bool    // whether the last Load parsed one pool's text only
}

// earlier is what a load takes from an earlier load of the file: the
// tree of the file when it is known (it did not change), the earlier
// config, whose unchanged pools are taken as they are, and the
// fingerprints of its pools by the node of their value.
type earlier struct {
	root *yaml.Node
	prev *Config
	sums map[*yaml.Node]poolSum
}

// NewLoader returns a Loader of the config file at path; last, if not nil,
// is a config already loaded from it (by Load), whose pools the first
// load may reuse.
func NewLoader(path string, last *Config) *Loader {
	return &Loader{path: path, last: earlier{prev: last}}
}

// Load reads the file and loads it as Load does; the errors are Load's.
func (l *Loader) Load() (*Config, error) {
	data, err := readConfig(l.path)
	if err != nil {
		return nil, err
	}
	e := l.last
	e.root = nil
	plain := plainBreaks(data)
	if b := l.base; b != nil && bytes.Equal(data, b.data) {
		e.root = b.root
	} else if b != nil && plain {
		e.root = b.splice(data)
	}
	l.spliced = e.root != nil && e.root != l.base.root
	c, err := parse(l.path, data, &e)
	if err != nil {
		return nil, err
	}
	// A spliced tree is as plain as the two it was made of.
	l.last, l.base = e, newLayout(data, e.root, plain, l.spliced)
	return c, nil
}
