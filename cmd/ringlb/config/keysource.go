package config

// This file decodes hash.key's key sources: uri, path, ip, host, cookie,
// header, query, json, prefix and combine.

import (
	"net/textproto"

	"github.com/ringlb/ringlb/balancer/key"
	"gopkg.in/yaml.v3"
)

// keySourceKinds are the kinds of key source, for "did you mean".
var keySourceKinds = map[key.Kind]bool{
	key.URI: true, key.Path: true, key.IP: true, key.Host: true,
	key.Cookie: true, key.Header: true, key.Query: true, key.JSON: true,
	key.Prefix: true, key.Combine: true,
}

// keySourceForm lists the forms of a key source, for messages.
const keySourceForm = "uri, path, ip, host, `cookie: NAME`, `header: NAME`, `query: NAME`, `json: PATH`, `prefix: {bytes: N}` or `combine: [SOURCE, ...]`"

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
		return d.bareKeySource(f, n)
	case n.Kind == yaml.MappingNode:
		return d.namedKeySource(f, n, combine)
	}
	d.typeErr(f, n, keySourceForm)
	return key.Source{}
}

// bareKeySource decodes a key source written as a bare word (n, a
// scalar): uri, path, ip or host.
func (d *decoder) bareKeySource(f string, n *yaml.Node) key.Source {
	switch k := key.Kind(n.Value); k {
	case key.URI, key.Path, key.IP, key.Host:
		return key.Source{Kind: k}
	case key.Cookie, key.Header, key.Query:
		d.badValue(f, n, "%s needs a name, like `%s: NAME`", k, k)
		return key.Source{}
	case key.JSON:
		d.badValue(f, n, "json needs a field path, like `json: user` or `json: metadata.session`")
		return key.Source{}
	case key.Prefix:
		d.badValue(f, n, "prefix needs its length, like `prefix: {bytes: 256}`")
		return key.Source{}
	case key.Combine:
		d.badValue(f, n, "combine needs a list of sources, like `combine: [host, uri]`")
		return key.Source{}
	}
	d.badValue(f, n, "unknown key source %s%s; want %s", describe(n), didYouMean(n.Value, keySourceKinds), keySourceForm)
	return key.Source{}
}

// namedKeySource decodes a key source written as a one-entry mapping (n):
// cookie|header|query: NAME, json: PATH, or, when combine, combine: a
// list of sources.
func (d *decoder) namedKeySource(f string, n *yaml.Node, combine bool) key.Source {
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
	case key.Prefix:
		d.lines[kf] = nodePos(k)
		return d.prefixSource(f, kf, v)
	case key.Combine:
		d.lines[kf] = nodePos(k)
		if !combine {
			d.badValue(kf, k, "a combine cannot hold another combine; list its sources in the outer one")
			d.bad[f] = true
			return key.Source{}
		}
		return d.combineSource(f, kf, v)
	case key.URI, key.Path, key.IP, key.Host:
		d.badValue(kf, k, "takes no name; write `- %s`", kind)
		d.bad[f] = true
		return key.Source{}
	}
	d.badValue(f, k, "unknown key source %s%s; want %s", describe(k), didYouMean(k.Value, keySourceKinds), keySourceForm)
	return key.Source{}
}

// prefixFields are the fields of a prefix source's mapping.
var prefixFields = map[string]*field{"bytes": {key: "bytes"}}

// prefixSource decodes the value v of a prefix source (at kf, in the key
// source at f): a mapping {bytes: N}, or N alone. A value that fails
// marks f bad and gives the zero key.Source.
func (d *decoder) prefixSource(f, kf string, v *yaml.Node) key.Source {
	src := key.Source{Kind: key.Prefix}
	ok := true
	switch r := resolve(v); {
	case r.Kind == yaml.ScalarNode && !isNull(r):
		src.Bytes, ok = d.integer(kf, r)
	case r.Kind == yaml.MappingNode:
		bf, errs := join(kf, "bytes"), len(d.errs)
		d.mapping(kf, r, prefixFields, func(f string, _ *field, v *yaml.Node) {
			src.Bytes, ok = d.integer(f, v)
		})
		if _, has := d.lines[bf]; !has && len(d.errs) == errs {
			d.badValue(kf, r, "needs bytes, the length of the key, like `prefix: {bytes: 256}`")
		}
		ok = ok && len(d.errs) == errs
	default:
		d.typeErr(kf, r, "`{bytes: N}` or a number of bytes")
		ok = false
	}
	if !ok {
		d.bad[f] = true
		return key.Source{}
	}
	return src
}

// combineSource decodes the list v of a combine (at kf, in the key source
// at f): each part a key source that is not a combine. A part that fails
// marks f bad and gives the zero key.Source.
func (d *decoder) combineSource(f, kf string, v *yaml.Node) key.Source {
	src := key.Source{Kind: key.Combine, Sources: []key.Source{}}
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
}
