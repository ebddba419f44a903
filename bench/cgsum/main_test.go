package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A callgrind file's instruction lines go to the symbol holding their
// address; a call's inclusive cost (the line after calls=) and lines
// that are not instructions count for nothing.
func TestAttribute(t *testing.T) {
	syms := []symbol{{0x1000, 0x100, "a"}, {0x1100, 0x80, "b"}, {0x2000, 0, "c"}}
	in := `version: 1
creator: callgrind-3.19.0
events: Ir
fn=a
0x1000 5
0x10ff 7
cfn=b
calls=3 0x1100
0x1010 1000
0x1104 11
fn=b
0x1180 13
0x2004 17
0x900 19
`
	got, err := attribute(strings.NewReader(in), syms)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"a": 12, "b": 11, "?": 13 + 19, "c": 17}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %d, want %d (all: %v)", k, got[k], v, got)
		}
	}
	if _, err := attribute(strings.NewReader("0x1000 7 5\n"), syms); err != nil {
		t.Errorf("a line with a line number before the cost: %v", err)
	}
	if _, err := attribute(strings.NewReader("0xzz 5\n"), syms); err == nil {
		t.Error("a bad address was accepted")
	}
}

// A summary's first line is the total over n, and -diff orders functions
// by how much more the first summary spends in them.
func TestSumAndDiff(t *testing.T) {
	var b bytes.Buffer
	writeSum(&b, map[string]uint64{"x": 300, "y": 100, "z": 0}, 100)
	if got, want := b.String(), "4\tTOTAL\n3\tx\n1\ty\n"; got != want {
		t.Fatalf("sum %q, want %q", got, want)
	}
	dir := t.TempDir()
	pa, pb := filepath.Join(dir, "a.sum"), filepath.Join(dir, "b.sum")
	write := func(p, s string) {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(pa, "10\tTOTAL\n7\tx\n3\ty\n")
	write(pb, "6\tTOTAL\n1\tx\n5\tz\n")
	var d bytes.Buffer
	if err := diffSums(&d, pa, pb); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(d.String()), "\n")
	var names []string
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		names = append(names, f[len(f)-1]+"="+f[0])
	}
	if got, want := strings.Join(names, " "), "x=6 TOTAL=4 y=3 z=-5"; got != want {
		t.Errorf("diff order %q, want %q\n%s", got, want, d.String())
	}
	write(pb, "not a summary\n")
	if err := diffSums(&d, pa, pb); err == nil {
		t.Error("a file that is not a summary was accepted")
	}
}
