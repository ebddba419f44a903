package admin

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestDashArray(t *testing.T) {
	owners := []int{1, 1, 0, 0, 0, 1, 2, 1}
	for member, want := range map[int]string{
		0: "0 2 3 3",     // starts with an empty dash
		1: "2 3 1 1 1 0", // ends with a dash: padded to an even length
		2: "0 6 1 1",
		3: "0 8",
	} {
		got := dashArray(owners, member)
		if got != want {
			t.Errorf("member %d: %q, want %q", member, got, want)
		}
		sum := 0
		for _, f := range strings.Fields(got) {
			n, _ := strconv.Atoi(f)
			sum += n
		}
		if sum != len(owners) {
			t.Errorf("member %d: %q sums to %d, want %d", member, got, sum, len(owners))
		}
	}
}

// TestStatusPageRendered checks the page as the server renders it, before
// any script runs: one arc per upstream, greyed when ejected, names
// escaped, and nothing loaded from elsewhere.
func TestStatusPageRendered(t *testing.T) {
	b, srv := setup(t, nil)
	b.SetHealthy("a", false, "test")
	code, hdr, body := fetch(t, http.MethodGet, srv.URL+"/?key=%3Cscript%3E")
	if code != 200 || hdr.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("GET /: %d %s", code, hdr.Get("Content-Type"))
	}
	arcs := regexp.MustCompile(`<circle class="arc ([a-z-]+)" id="arc-\d+" data-upstream="([^"]*)"[^>]* stroke="([^"]*)"`).FindAllStringSubmatch(body, -1)
	if len(arcs) != 2 {
		t.Fatalf("%d arcs, want 2:\n%s", len(arcs), body)
	}
	for _, a := range arcs {
		state, name, stroke := a[1], a[2], a[3]
		switch name {
		case "a":
			if state != "ejected" || stroke != greyColor {
				t.Errorf("ejected a: class %q stroke %q", state, stroke)
			}
		case "&lt;b&gt;":
			if state != "available" || stroke == greyColor {
				t.Errorf("<b>: class %q stroke %q", state, stroke)
			}
		default:
			t.Errorf("arc for %q", name)
		}
	}
	if !strings.Contains(body, "ejected (health)") || !strings.Contains(body, "1 of 2 upstreams available") {
		t.Errorf("the page does not say a is ejected:\n%s", body)
	}
	if strings.Contains(body, "<script>alert") || strings.Contains(body, `value="<script>"`) || !strings.Contains(body, `value="&lt;script&gt;"`) {
		t.Errorf("?key= is not escaped into the lookup box")
	}
	for _, external := range []string{"<link", " src=", `href="http`, `href="//`, "@import"} {
		if strings.Contains(body, external) {
			t.Errorf("the page loads something from elsewhere (%q); it must be self-contained", external)
		}
	}
}
