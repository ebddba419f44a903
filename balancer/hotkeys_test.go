package balancer

import (
	"fmt"
	"net/http"
	"testing"
)

// Through the proxy: a hot key's requests are counted once each, with
// where they went, and ringlb_hot_key_share follows.
func TestHotKeysServed(t *testing.T) {
	b, reg, front := proxy(t, baseOptions(upstreamsOf(t, newBackend(t, "a"), newBackend(t, "b"))))
	for i := range 30 {
		k := "hot"
		if i%3 == 0 {
			k = fmt.Sprint("cold-", i)
		}
		if code, _, _ := get(t, front.Client(), front.URL+"/", "X-User-ID", k); code != http.StatusOK {
			t.Fatal(code)
		}
	}
	hk := b.HotKeys(false)
	lk := b.Lookup("hot")
	if hk.Requests != 30 || len(hk.Keys) != 11 || fmt.Sprintf("%016x", hk.Keys[0].Hash) != lk.Hash || hk.Keys[0].Requests != 20 || hk.Keys[0].Sent != lk.Chosen {
		t.Errorf("hot keys %+v; lookup %+v", hk, lk)
	}
	if v := metric(t, reg, "ringlb_hot_key_share", "pool=default"); v < 0.66 || v > 0.67 {
		t.Errorf("ringlb_hot_key_share = %v, want 20/30", v)
	}
	if res, ok := b.LookupHash(lk.Hash); !ok || res.Owner != lk.Owner || res.Chosen != lk.Chosen || res.Key != "" {
		t.Errorf("LookupHash(%s) = %+v %v", lk.Hash, res, ok)
	}
	for _, bad := range []string{"", "xyz", "123", "00000000000000000"} {
		if _, ok := b.LookupHash(bad); ok {
			t.Errorf("LookupHash(%q) ok", bad)
		}
	}
}
