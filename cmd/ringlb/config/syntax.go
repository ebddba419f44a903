package config

// This file reads the file as one YAML document and places yaml.v3's
// syntax errors on the lines they concern.

import (
	"bytes"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

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
