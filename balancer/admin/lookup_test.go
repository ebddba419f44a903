package admin

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"
)

// /debug/lookup with a described request takes its key as the proxy
// would and places it as ?key= does.
func TestLookupRequest(t *testing.T) {
	b, srv := setup(t, nil)
	get := func(q url.Values) (int, map[string]any) {
		t.Helper()
		code, _, body := fetch(t, http.MethodGet, srv.URL+"/debug/lookup?"+q.Encode())
		var m map[string]any
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		return code, m
	}
	code, m := get(url.Values{"path": {"/cart?x=1"}, "header": {"X-User-ID: user-42"}, "cookie": {"session=abc"}})
	want := b.Lookup("user-42")
	if code != 200 || m["key"] != "user-42" || m["source"] != "header X-User-ID" || m["owner"] != want.Owner || m["chosen"] != want.Chosen || m["hash"] != want.Hash {
		t.Errorf("request lookup: %d %v, want key user-42 from header X-User-ID on %s", code, m, want.Owner)
	}
	code, m = get(url.Values{"path": {"/cart"}})
	if code != 200 || m["key"] != nil || m["on_missing"] != "random" || m["outcome"] != "a random upstream: no affinity" {
		t.Errorf("request without a key: %d %v", code, m)
	}
	for _, bad := range []url.Values{{"path": {"cart"}}, {"header": {"no colon"}}} {
		if code, m := get(bad); code != 400 || m["error"] == nil {
			t.Errorf("%v: %d %v, want 400", bad, code, m)
		}
	}
}
