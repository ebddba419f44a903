package admin

import (
	"net/http"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/hotkeys"
)

// hotKeysJSON is /debug/hotkeys' answer.
type hotKeysJSON struct {
	WindowSeconds float64      `json:"window_seconds"`
	Requests      uint64       `json:"requests"`
	Keys          []hotKeyJSON `json:"keys"`
}

type hotKeyJSON struct {
	Hash     string  `json:"hash"`
	Requests uint64  `json:"requests"`
	Share    float64 `json:"share"`
	Owner    *string `json:"owner"`
	Chosen   *string `json:"chosen"` // where its last request went; null for a 503
	Error    uint64  `json:"error"`  // requests may overstate by up to this much
}

// hotkeys answers /debug/hotkeys[?pool=NAME][&window=previous]: the
// hottest keys of the pool's current window (or of the complete one
// before it), by hash only.
func (h *handler) hotkeys(w http.ResponseWriter, r *http.Request) {
	b, ok := h.poolFor(w, r.URL.Query(), false)
	if !ok {
		return
	}
	prev := false
	switch r.URL.Query().Get("window") {
	case "", "current":
	case "previous":
		prev = true
	default:
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "window must be current or previous, got " + r.URL.Query().Get("window")})
		return
	}
	writeJSON(w, http.StatusOK, toHotKeysJSON(b.HotKeys(prev)))
}

func toHotKeysJSON(hk hotkeys.Window) hotKeysJSON {
	out := hotKeysJSON{WindowSeconds: hk.Seconds, Requests: hk.Requests, Keys: []hotKeyJSON{}}
	for _, k := range hk.Keys {
		out.Keys = append(out.Keys, hotKeyJSON{Hash: k.Hex, Requests: k.Requests, Share: k.Share, Owner: nullable(k.Owner), Chosen: nullable(k.Sent), Error: k.Error})
	}
	return out
}

// lookupHash answers /debug/lookup?hash=HEX: the placement of a key known
// by its hash (as /debug/hotkeys lists it); "key" is then null. With
// hash.salt_file the hash is a salted key hash, found only among the hot
// keys: 404 for another.
func (h *handler) lookupHash(w http.ResponseWriter, b *balancer.Balancer, hash string) {
	res, ok := b.LookupHash(hash)
	if !ok && b.SaltedKeyHashes() {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "hash " + hash + " is not the key hash of a hot key: with hash.salt_file, key hashes cannot be turned back into ring positions; ?hash= places a key that /debug/hotkeys lists, ?key= any key"})
		return
	}
	if !ok {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "hash must be the hex of a ring position as /debug/lookup and /debug/hotkeys show it, got " + hash})
		return
	}
	lj := toLookupJSON(res)
	lj.Pool = h.poolOf(b)
	writeJSON(w, http.StatusOK, struct {
		Key *string `json:"key"`
		*lookupJSON
	}{nil, &lj})
}

// nullable is s, or nil (JSON null) when s is "".
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
