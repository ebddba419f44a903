package config

// This file reads YAML nodes: aliases, mappings and sequences walked with
// their field paths, scalars of each kind, and how values are named in
// messages.

import (
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// resolve follows aliases to the node they name.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n.Kind == yaml.AliasNode && n.Alias != nil && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// isNull reports whether n is a null scalar (null, ~ or nothing).
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

// str decodes a string: any scalar but null, as written.
func (d *decoder) str(f string, n *yaml.Node) (string, bool) {
	n = resolve(n)
	if n.Kind != yaml.ScalarNode || isNull(n) {
		d.typeErr(f, n, "a string")
		return "", false
	}
	return n.Value, true
}

// integer decodes an integer.
func (d *decoder) integer(f string, n *yaml.Node) (int, bool) {
	n = resolve(n)
	var v int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		d.typeErr(f, n, "an integer")
		return 0, false
	}
	return v, true
}

// number decodes a finite number, an integer or a float.
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

// boolean decodes true or false.
func (d *decoder) boolean(f string, n *yaml.Node) (bool, bool) {
	n = resolve(n)
	var v bool
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || n.Decode(&v) != nil {
		d.typeErr(f, n, "true or false")
		return false, false
	}
	return v, true
}

// duration decodes a duration written as a string like 2s.
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
