package route

import (
	"bytes"
	"errors"
	"strings"
)

// The errors Path refuses a path with.
var (
	ErrPathAboveRoot = errors.New(`its ".." segments climb above the root`)
	ErrPathNUL       = errors.New("it holds a NUL (%00)")
)

// Path returns a request's path (percent-decoded, as URL.Path is) as
// routes match it, which is how nginx matches its locations: runs of
// slashes merged into one (nginx's merge_slashes, on by default), then
// the dot segments "." and ".." removed (RFC 3986 section 5.2.4). A "/"
// net/http decoded from %2F counts as a slash like any other, as in
// nginx, so "/static/..%2fsecret" is "/secret", "//static/a" and
// "/x/..//static/a" are "/static/a", and "/static/." is "/static/". It
// fails with ErrPathAboveRoot when a ".." climbs above the root
// ("/static/../../a") and with ErrPathNUL for a NUL in the path: nginx
// answers both 400. A path that does not start with "/" ("*", "") is
// returned as it is.
//
// A path with no "//", no "." or ".." segment and no NUL, as nearly
// every request's, is returned as it is, without a copy.
func Path(path string) (string, error) {
	if !needsClean(path) {
		return path, nil
	}
	if strings.IndexByte(path, 0) >= 0 {
		return "", ErrPathNUL
	}
	var buf [256]byte
	out := buf[:0]
	for i := 0; i < len(path); {
		for i < len(path) && path[i] == '/' { // a run of slashes is one
			i++
		}
		j := i
		for j < len(path) && path[j] != '/' {
			j++
		}
		switch seg := path[i:j]; seg {
		case "", ".": // "" only at the end, after a slash
		case "..":
			k := bytes.LastIndexByte(out, '/')
			if k < 0 {
				return "", ErrPathAboveRoot
			}
			out = out[:k]
		default:
			out = append(append(out, '/'), seg...)
			i = j
			continue
		}
		if j == len(path) {
			out = append(out, '/') // "/a/", "/a/." and "/b/a/.." end in a directory
		}
		i = j
	}
	return string(out), nil
}

// needsClean reports whether Path would change or refuse path: it
// starts with '/' and holds a NUL, "//", or a "." or ".." segment. Each
// check is one of the strings package's searches, the fastest way
// through a path that has none.
func needsClean(path string) bool {
	if len(path) == 0 || path[0] != '/' {
		return false
	}
	if strings.IndexByte(path, 0) >= 0 || strings.Contains(path, "//") {
		return true
	}
	for i := 0; ; {
		j := strings.Index(path[i:], "/.")
		if j < 0 {
			return false
		}
		i += j + 2
		rest := path[i:] // after "/.": a "." segment, a ".." one, or a name
		if rest == "" || rest[0] == '/' || rest[0] == '.' && (len(rest) == 1 || rest[1] == '/') {
			return true
		}
	}
}
