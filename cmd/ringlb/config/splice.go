package config

import (
	"bytes"
	"io"
	"slices"

	"gopkg.in/yaml.v3"
)

// Parsing a large file is most of what a reload costs (yaml.v3 reads
// about 7 MB/s), so when a file differs from the last one that loaded
// only inside the text of one pool, the Loader parses that pool's text
// alone, with yaml.v3, and puts its tree in place of the old pool's in
// the last tree. The result is the tree a parse of the whole file gives:
//
//   - the last file was one block mapping with a block pools mapping
//     whose entries each start a line at the same column, and no aliases
//     anywhere (so no node outside the pool can stand for one inside);
//     it had no directives and no line breaks but LF and CRLF, so lines
//     are where yaml.v3 counts them;
//   - the bytes before and after the pool's text (from its key's line up
//     to the next entry's key line, or the next top-level key, or the
//     end) are the same as before; the new text ends at the end of a
//     line;
//   - every line of the new text after the first is blank or indented
//     deeper than the pool's key, and the text, with as many line breaks
//     before it as lines come before it in the file, parses alone into
//     one document: a block mapping of one key at the old key's line and
//     column, without aliases.
//
// A block mapping's entry is then parsed exactly as when it stands
// alone: what comes before it is closed at its key's line, which is
// indented as the mapping's keys are, and its text ends where a line
// indented as those keys (or less) begins, or at the end, without a
// flow collection, quoted scalar or anything else left open (the text
// alone would not parse). The nodes after the pool move by the lines the
// text gained or lost. Whenever one of these conditions does not hold,
// the whole file is parsed as always, which also gives every syntax
// error its usual message.

// layout is what the Loader knows of the last file that loaded: its
// bytes and tree, where its lines start, and, when it can be spliced,
// its pools.
type layout struct {
	data  []byte
	root  *yaml.Node
	lines []int // lines[i]: the offset where line i+1 starts

	pools   *yaml.Node // the pools mapping; nil: the file cannot be spliced
	poolsAt int        // the index of pools' value in root.Content
	col     int        // the column of the pools' keys
	ends    []int      // ends[j]: the line after pool j's text (its last + 1)
}

// newLayout describes a file that loaded, with its tree; plain is
// plainBreaks(data), and noAlias says that the tree is known to be
// without aliases (else it is looked at).
func newLayout(data []byte, root *yaml.Node, plain, noAlias bool) *layout {
	l := &layout{data: data, root: root, lines: lineStarts(data)}
	if plain && (noAlias || plainTree(root, 0)) {
		l.pools, l.poolsAt = l.splicable()
	}
	return l
}

// lineStarts returns the offset of the start of each line of data.
func lineStarts(data []byte) []int {
	starts := make([]int, 1, bytes.Count(data, []byte{'\n'})+1)
	for i, b := range data {
		if b == '\n' {
			starts = append(starts, i+1)
		}
	}
	return starts
}

// offset returns where line n (1-based) starts; len(data) after the last.
func (l *layout) offset(n int) int {
	if n-1 < len(l.lines) {
		return l.lines[n-1]
	}
	return len(l.data)
}

// plainBreaks reports whether data can have its lines counted by LF: no
// UTF-16 byte order mark, no CR but in CRLF, no NEL, LS or PS (which
// yaml.v3 takes for line breaks too) and no directive.
func plainBreaks(data []byte) bool {
	if len(data) == 0 || data[0] == 0xFE || data[0] == 0xFF || data[0] == 0 {
		return false
	}
	for i := bytes.IndexByte(data, '\r'); i >= 0; {
		if i+1 >= len(data) || data[i+1] != '\n' {
			return false
		}
		j := bytes.IndexByte(data[i+1:], '\r')
		if j < 0 {
			break
		}
		i += 1 + j
	}
	return !bytes.Contains(data, []byte("\u0085")) && !bytes.Contains(data, []byte("\u2028")) &&
		!bytes.Contains(data, []byte("\u2029")) && data[0] != '%' && !bytes.Contains(data, []byte("\n%"))
}

// splicable returns the pools mapping and the index of its node in
// root.Content when the file, whose breaks are plain and whose tree has
// no alias, can be spliced (see above), and fills col and ends; else nil.
func (l *layout) splicable() (*yaml.Node, int) {
	root := l.root
	if len(l.data) == 0 || root.Kind != yaml.MappingNode || root.Style&yaml.FlowStyle != 0 {
		return nil, 0
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value != "pools" {
			continue
		}
		if v.Kind != yaml.MappingNode || v.Style&yaml.FlowStyle != 0 || len(v.Content) == 0 || !l.startsLine(k) {
			return nil, 0
		}
		end := len(l.lines) + 1 // the line after the last
		if i+2 < len(root.Content) {
			next := root.Content[i+2]
			if !l.startsLine(next) {
				return nil, 0
			}
			end = next.Line
		}
		l.col = v.Content[0].Column
		l.ends = make([]int, len(v.Content)/2)
		for j := 0; j < len(v.Content); j += 2 {
			key := v.Content[j]
			if key.Kind != yaml.ScalarNode || key.Column != l.col || !l.startsLine(key) {
				return nil, 0
			}
			l.ends[j/2] = end
			if j+2 < len(v.Content) {
				l.ends[j/2] = v.Content[j+2].Line
			}
			if l.ends[j/2] <= key.Line {
				return nil, 0
			}
		}
		return v, i + 1
	}
	return nil, 0
}

// startsLine reports whether only spaces come before key on its line.
func (l *layout) startsLine(key *yaml.Node) bool {
	if key.Line < 1 || key.Line > len(l.lines) || key.Column < 1 {
		return false
	}
	at := l.lines[key.Line-1]
	if at+key.Column-1 >= len(l.data) {
		return false
	}
	for _, b := range l.data[at : at+key.Column-1] {
		if b != ' ' {
			return false
		}
	}
	return l.data[at+key.Column-1] != ' '
}

// maxSpliceDepth bounds the trees spliced, far below yaml.v3's own
// limits on nesting, which a tree spliced deeper than it was parsed must
// not be near.
const maxSpliceDepth = 1000

// plainTree reports whether the tree n, at depth, holds no alias and is
// not nested deeper than maxSpliceDepth.
func plainTree(n *yaml.Node, depth int) bool {
	if n.Kind == yaml.AliasNode || depth > maxSpliceDepth {
		return false
	}
	for _, c := range n.Content {
		if !plainTree(c, depth+1) {
			return false
		}
	}
	return true
}

// splice returns the tree of data, a new version of the file whose
// breaks are plain, made from the last tree and a parse of the one pool
// whose text changed; nil when it cannot be (see above): then data is to
// be parsed whole.
func (l *layout) splice(data []byte) *yaml.Node {
	old := l.data
	if l.pools == nil || len(data) == 0 {
		return nil
	}
	// The common prefix up to the start of its last line, so that the
	// suffix may take that line: new "  b:\n  c:" for old "  b:\n    x:
	// 1\n  c:" is b's text emptied, not c's key changed.
	p := bytes.LastIndexByte(old[:commonPrefix(old, data)], '\n') + 1
	s := commonSuffix(old[p:], data[p:])
	// The pool whose text holds old[p:len(old)-s].
	for j := 0; j < len(l.ends); j++ {
		key := l.pools.Content[2*j]
		start, end := l.offset(key.Line), l.offset(l.ends[j])
		if start > p || len(old)-s > end {
			continue
		}
		newEnd := end + len(data) - len(old)
		if newEnd <= start || (newEnd < len(data) && data[newEnd-1] != '\n') {
			return nil
		}
		text := data[start:newEnd]
		k, v := l.parseEntry(key.Line, text)
		if k == nil {
			return nil
		}
		// Nodes follow only a text that ends with a line break.
		delta := bytes.Count(text, []byte{'\n'}) - bytes.Count(old[start:end], []byte{'\n'})
		return l.replace(j, k, v, delta)
	}
	return nil
}

// parseEntry parses text, the text of a pool's entry from its key's
// line on (line), alone; it returns the entry's key and value, or nils
// when the text is not one entry as the file's pool keys are (see
// above).
func (l *layout) parseEntry(line int, text []byte) (key, value *yaml.Node) {
	for i, ln := range bytes.SplitAfter(text, []byte{'\n'}) {
		indent := 0
		for indent < len(ln) && ln[indent] == ' ' {
			indent++
		}
		rest := bytes.TrimRight(ln[indent:], "\r\n")
		switch {
		case i == 0 && (indent != l.col-1 || len(rest) == 0):
			return nil, nil
		case i > 0 && len(rest) > 0 && (indent < l.col || rest[0] == '\t'):
			return nil, nil
		}
	}
	src := make([]byte, line-1, line-1+len(text))
	for i := range src {
		src[i] = '\n'
	}
	dec := yaml.NewDecoder(bytes.NewReader(append(src, text...)))
	var doc, extra yaml.Node
	if dec.Decode(&doc) != nil || dec.Decode(&extra) != io.EOF || len(doc.Content) != 1 {
		return nil, nil
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode || m.Style&yaml.FlowStyle != 0 || len(m.Content) != 2 || !plainTree(m, 2) {
		return nil, nil
	}
	if k := m.Content[0]; k.Kind != yaml.ScalarNode || k.Line != line || k.Column != l.col {
		return nil, nil
	}
	return m.Content[0], m.Content[1]
}

// replace returns a copy of the last tree with pool j's key and value
// replaced, and the nodes after them moved down delta lines; the last
// tree is left as it was.
func (l *layout) replace(j int, key, value *yaml.Node, delta int) *yaml.Node {
	pools := *l.pools
	pools.Content = slices.Clone(l.pools.Content)
	pools.Content[2*j], pools.Content[2*j+1] = key, value
	root := *l.root
	root.Content = slices.Clone(l.root.Content)
	root.Content[l.poolsAt] = &pools
	if delta != 0 {
		for i := 2*j + 2; i < len(pools.Content); i++ {
			pools.Content[i] = moved(pools.Content[i], delta)
		}
		for i := l.poolsAt + 1; i < len(root.Content); i++ {
			root.Content[i] = moved(root.Content[i], delta)
		}
	}
	return &root
}

// moved returns a copy of the tree n with every line moved by delta.
func moved(n *yaml.Node, delta int) *yaml.Node {
	c := *n
	c.Line += delta
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = moved(k, delta)
	}
	return &c
}

// commonPrefix returns the length of the longest common prefix of a and b.
func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i+64 <= n && bytes.Equal(a[i:i+64], b[i:i+64]) {
		i += 64
	}
	for i < n && a[i] == b[i] {
		i++
	}
	return i
}

// commonSuffix returns the length of the longest common suffix of a and b.
func commonSuffix(a, b []byte) int {
	n := min(len(a), len(b))
	i := 0
	for i+64 <= n && bytes.Equal(a[len(a)-i-64:len(a)-i], b[len(b)-i-64:len(b)-i]) {
		i += 64
	}
	for i < n && a[len(a)-1-i] == b[len(b)-1-i] {
		i++
	}
	return i
}
