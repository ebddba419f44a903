package config

import (
	"cmp"
	"slices"
	"strconv"
	"strings"
)

// FieldError is one problem in a config file. Its Error is
// "FILE:LINE: FIELD: MSG"; the LINE part is left out when Line is 0 (the
// problem concerns the whole file: it cannot be read, or is empty) and the
// FIELD part when Field is "" (YAML syntax errors, a root that is not a
// mapping). The JSON form is what POST /reload reports.
type FieldError struct {
	File  string `json:"file"`
	Line  int    `json:"line,omitempty"`  // 1-based; 0 when unknown
	Field string `json:"field,omitempty"` // e.g. upstreams[1].weight
	Msg   string `json:"message"`

	err error // the underlying error (os or yaml), if any
	col int   // orders problems that share a line
}

// Error formats the problem as FILE:LINE: FIELD: MSG.
func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteByte(':')
		b.WriteString(strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns the underlying error, such as the *fs.PathError of a file
// that cannot be read, so errors.Is(err, fs.ErrNotExist) works.
func (e *FieldError) Unwrap() error { return e.err }

// Errors is every problem found in one config file, in line order. Load and
// Parse return it (as an error) whenever they fail, so callers can list the
// problems with errors.As:
//
//	var errs config.Errors
//	if errors.As(err, &errs) { ... }
type Errors []*FieldError

// Error returns the problems one per line.
func (es Errors) Error() string {
	var b strings.Builder
	for i, e := range es {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.Error())
	}
	return b.String()
}

// Unwrap returns the individual problems, for errors.Is and errors.As.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// sortByLine orders problems by position in the file.
func (es Errors) sortByLine() {
	slices.SortStableFunc(es, func(a, b *FieldError) int {
		return cmp.Or(cmp.Compare(a.Line, b.Line), cmp.Compare(a.col, b.col))
	})
}
