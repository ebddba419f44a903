package route

import (
	"path"
	"strings"
	"testing"
)

// RoutePath reads a decoded path as nginx's locations do: slashes merged,
// dot segments removed, 400's errors for a climb above the root and a NUL.
// cmd/ringlb's TestRoutePathsAsNginx checks the same rules against nginx.
func TestRoutePath(t *testing.T) {
	for _, c := range []struct {
		in, want string
		err      error
	}{
		{"/static/a", "/static/a", nil},
		{"/", "/", nil},
		{"", "", nil},
		{"*", "*", nil},
		{"/static/../secret", "/secret", nil},
		{"/static/a/../../secret", "/secret", nil},
		{"//static//a", "/static/a", nil},
		{"/x/..//static/a", "/static/a", nil},
		{"/./static/a", "/static/a", nil},
		{"/static/.", "/static/", nil},
		{"/static/./", "/static/", nil},
		{"/static/..", "/", nil},
		{"/static/a/..", "/static/", nil},
		{"/static/a/../", "/static/", nil},
		{"/static/a//", "/static/a/", nil},
		{"/a/b/c/./../../d", "/a/d", nil},
		{"/static/...", "/static/...", nil},
		{"/.well-known/x", "/.well-known/x", nil},
		{"/.well-known/./x", "/.well-known/x", nil},
		{"/static/..a/.b", "/static/..a/.b", nil},
		{"/a#/../b", "/b", nil},
		{"/..", "", ErrPathAboveRoot},
		{"/../static/a", "", ErrPathAboveRoot},
		{"/static/../../a", "", ErrPathAboveRoot},
		{"/a/b/../../..", "", ErrPathAboveRoot},
		{"/static/\x00a", "", ErrPathNUL},
		{"/" + strings.Repeat("a/./", 100), "/" + strings.Repeat("a/", 100), nil}, // longer than the stack buffer
	} {
		got, err := Path(c.in)
		if got != c.want || err != c.err {
			t.Errorf("Path(%q) = %q, %v; want %q, %v", c.in, got, err, c.want, c.err)
		}
	}
}

// BenchmarkRoutePath is the check every routed request's path goes
// through, for a path with nothing to clean: it must report 0 allocs/op.
func BenchmarkRoutePath(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Path("/api/v1/users/12345/cart"); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzRoutePath: what RoutePath returns has no "//" and no dot segment,
// is its own RoutePath, and names the file path.Clean names (path.Clean
// differs only in dropping a final slash); a path with nothing to clean
// comes back as it is.
func FuzzRoutePath(f *testing.F) {
	for _, s := range []string{"/static/../secret", "//a//b/", "/a/./b/..", "/.well-known/x", "/..", "/a/..."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		p = "/" + p
		got, err := Path(p)
		if err != nil {
			if err == ErrPathNUL && !strings.Contains(p, "\x00") || err != ErrPathNUL && err != ErrPathAboveRoot {
				t.Fatalf("Path(%q): %v", p, err)
			}
			return
		}
		if needsClean(got) {
			t.Fatalf("Path(%q) = %q, which still needs cleaning", p, got)
		}
		if again, _ := Path(got); again != got {
			t.Fatalf("Path(%q) = %q, whose Path is %q", p, got, again)
		}
		if path.Clean(got) != path.Clean(p) {
			t.Fatalf("Path(%q) = %q; path.Clean: %q", p, got, path.Clean(p))
		}
		if !needsClean(p) && got != p {
			t.Fatalf("Path(%q) = %q, changed a clean path", p, got)
		}
	})
}
