package config

// This file is the decoder's state: the field paths present in the file
// and their lines, the fields that failed to decode, and the problems
// recorded against them.

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

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

	// requestID is request_id_header, which a pool's handoff.header may
	// not reuse.
	requestID string
}

// newDecoder returns a decoder for the file named file, with nothing recorded.
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

// nodePos is n's position in the file.
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

// lineOf is the position of field or, when it is absent, of its nearest
// present parent (the root's without one).
func (d *decoder) lineOf(field string) pos {
	for p := d.prefix + field; p != ""; p = parent(p) {
		if l, ok := d.lines[p]; ok {
			return l
		}
	}
	return d.rootPos
}

// isBad reports whether field or a parent of it failed to decode.
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

// join is the path of field key under path p ("" for the root).
func join(p, key string) string {
	if p == "" {
		return key
	}
	return p + "." + key
}

// index is the path of entry i of the list at path p.
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

// lineOrNode is the position of field's key, else of its value n, else
// of its nearest present parent.
func (d *decoder) lineOrNode(field string, n *yaml.Node) pos {
	if l, ok := d.lines[field]; ok {
		return l
	}
	if n != nil && n.Line > 0 {
		return nodePos(n)
	}
	return d.lineOf(field)
}
