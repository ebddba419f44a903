package config

// This file decodes hash.key's key sources: uri, path, ip, host, cookie,
// header, query, json and combine.

import (
	"net/textproto"

	"github.com/ringlb/ringlb/balancer"
	"gopkg.in/yaml.v3"
)

// keySourceKinds are the kinds of key source, for "did you mean".
var keySourceKinds = map[balancer.KeyKind]bool{
	balancer.KeyURI: true, balancer.KeyPath: true, balancer.KeyIP: true, balancer.KeyHost: true,
	balancer.KeyCookie: true, balancer.KeyHeader: true, balancer.KeyQuery: true, balancer.KeyJSON: true,
	balancer.KeyCombine: true,
}

// keySourceForm lists the forms of a key source, for messages.
const keySourceForm = "uri, path, ip, host, `cookie: NAME`, `header: NAME`, `query: NAME`, `json: PATH` or `combine: [SOURCE, ...]`"

// keySource decodes one hash.key entry: a bare uri, path, ip or host, a
// one-entry mapping cookie|header|query: NAME or json: PATH, or combine:
// a list of those. On failure it returns the zero balancer.KeySource (and f is
// marked bad, so validation skips it).
func (d *decoder) keySource(f string, n *yaml.Node) balancer.KeySource {
	return d.keySourceIn(f, n, true)
}

// keySourceIn decodes a key source; combine says it may be a combine (it
// is not one of a combine's parts).
func (d *decoder) keySourceIn(f string, n *yaml.Node, combine bool) balancer.KeySource {
	n = resolve(n)
	switch {
	case n.Kind == yaml.ScalarNode && !isNull(n):
		return d.bareKeySource(f, n)
	case n.Kind == yaml.MappingNode:
		return d.namedKeySource(f, n, combine)
	}
	d.typeErr(f, n, keySourceForm)
	return balancer.KeySource{}
}

// bareKeySource decodes a key source written as a bare word (n, a
// scalar): uri, path, ip or host.
func (d *decoder) bareKeySource(f string, n *yaml.Node) balancer.KeySource {
	switch k := balancer.KeyKind(n.Value); k {
	case balancer.KeyURI, balancer.KeyPath, balancer.KeyIP, balancer.KeyHost:
		return balancer.KeySource{Kind: k}
	case balancer.KeyCookie, balancer.KeyHeader, balancer.KeyQuery:
		d.badValue(f, n, "%s needs a name, like `%s: NAME`", k, k)
		return balancer.KeySource{}
	case balancer.KeyJSON:
		d.badValue(f, n, "json needs a field path, like `json: user` or `json: metadata.session`")
		return balancer.KeySource{}
	case balancer.KeyCombine:
		d.badValue(f, n, "combine needs a list of sources, like `combine: [host, uri]`")
		return balancer.KeySource{}
	}
	d.badValue(f, n, "unknown key source %s%s; want %s", describe(n), didYouMean(n.Value, keySourceKinds), keySourceForm)
	return balancer.KeySource{}
}

// namedKeySource decodes a key source written as a one-entry mapping (n):
// cookie|header|query: NAME, json: PATH, or, when combine, combine: a
// list of sources.
func (d *decoder) namedKeySource(f string, n *yaml.Node, combine bool) balancer.KeySource {
	if len(n.Content) != 2 {
		d.badValue(f, n, "must be one source per list item (%s), got a mapping with %d entries", keySourceForm, len(n.Content)/2)
		return balancer.KeySource{}
	}
	k, v := resolve(n.Content[0]), n.Content[1]
	if k.Kind != yaml.ScalarNode {
		d.badValue(f, n, "must be %s, got a mapping with key %s", keySourceForm, describe(k))
		return balancer.KeySource{}
	}
	kf := join(f, quoteKey(k.Value))
	switch kind := balancer.KeyKind(k.Value); kind {
	case balancer.KeyCookie, balancer.KeyHeader, balancer.KeyQuery, balancer.KeyJSON:
		d.lines[kf] = nodePos(k)
		name, ok := d.str(kf, v)
		if !ok {
			d.bad[f] = true
			return balancer.KeySource{}
		}
		if kind == balancer.KeyHeader {
			name = textproto.CanonicalMIMEHeaderKey(name)
		}
		return balancer.KeySource{Kind: kind, Name: name}
	case balancer.KeyCombine:
		d.lines[kf] = nodePos(k)
		if !combine {
			d.badValue(kf, k, "a combine cannot hold another combine; list its sources in the outer one")
			d.bad[f] = true
			return balancer.KeySource{}
		}
		return d.combineSource(f, kf, v)
	case balancer.KeyURI, balancer.KeyPath, balancer.KeyIP, balancer.KeyHost:
		d.badValue(kf, k, "takes no name; write `- %s`", kind)
		d.bad[f] = true
		return balancer.KeySource{}
	}
	d.badValue(f, k, "unknown key source %s%s; want %s", describe(k), didYouMean(k.Value, keySourceKinds), keySourceForm)
	return balancer.KeySource{}
}

// combineSource decodes the list v of a combine (at kf, in the key source
// at f): each part a key source that is not a combine. A part that fails
// marks f bad and gives the zero balancer.KeySource.
func (d *decoder) combineSource(f, kf string, v *yaml.Node) balancer.KeySource {
	src := balancer.KeySource{Kind: balancer.KeyCombine, Sources: []balancer.KeySource{}}
	ok := d.sequence(kf, v, func(_ int, f string, n *yaml.Node) {
		p := d.keySourceIn(f, n, false)
		if p.Kind == "" {
			d.bad[kf] = true
		}
		src.Sources = append(src.Sources, p)
	})
	if !ok || d.bad[kf] {
		d.bad[f] = true
		return balancer.KeySource{}
	}
	return src
}
