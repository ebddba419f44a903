package balancer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/keyhash"
	"github.com/ringlb/ringlb/internal/testutil/redistest"
)

const testSalt = "fleet-salt-0123456789"

// TestSaltedKeyHashes: with hash.salt_file's salt, the key hashes ringlb
// reports (the access log's key_hash, the hot keys, Lookup's KeyHash) are
// the salted ones, which hashing candidate keys does not find, while
// placement and Lookup's Hash (the ring position) are what they are
// without it. LookupHash takes a hot key's salted hash.
func TestSaltedKeyHashes(t *testing.T) {
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	mk := func(salt string) (*Balancer, *jsonLog, func(key string) string) {
		jl := newJSONLog(t)
		opts := baseOptions(upstreamsOf(t, bes...))
		opts.Ring.LoadFactor = 0
		opts.Hash.Key = []key.Source{{Kind: key.Header, Name: "X-User-ID"}}
		opts.Hash.Salt = []byte(salt)
		opts.AccessLog = jl.l
		b, _, front := proxy(t, opts)
		return b, jl, func(key string) string {
			_, be, _ := get(t, front.Client(), front.URL+"/", "X-User-ID", key)
			return be
		}
	}
	plain, plainLog, plainGet := mk("")
	salted, saltedLog, saltedGet := mk(testSalt)
	ks := keys("", 30) // numeric user ids: "0" to "29"
	for _, k := range ks {
		if p, s := plainGet(k), saltedGet(k); p != s {
			t.Fatalf("key %s: served by %s without a salt, %s with: the salt moved it", k, p, s)
		}
	}
	for _, k := range ks[:5] { // hot: 2 requests more each
		saltedGet(k)
		saltedGet(k)
	}
	sal := keyhash.New([]byte(testSalt))
	plainLines, saltedLines := waitLines(t, plainLog, len(ks)), waitLines(t, saltedLog, len(ks)+10)
	// What a reader of the log could compute from candidate keys: every
	// number below 1000 through the ring's hash.
	guess := map[string]string{}
	for i := range 1000 {
		guess[fmt.Sprintf("%016x", xxhash.Sum64String(fmt.Sprint(i)))] = fmt.Sprint(i)
	}
	for i, k := range ks {
		pl, sl := plain.Lookup(k), salted.Lookup(k)
		pos := xxhash.Sum64String(k)
		want := keyhash.Hex(sal.Sum(pos))
		switch {
		case pl.Hash != sl.Hash || sl.Hash != fmt.Sprintf("%016x", pos):
			t.Errorf("key %s: Lookup hash %s without a salt, %s with; want the ring position %016x for both", k, pl.Hash, sl.Hash, pos)
		case pl.KeyHash != pl.Hash || sl.KeyHash != want:
			t.Errorf("key %s: KeyHash %s without a salt, %s with; want %s and %s", k, pl.KeyHash, sl.KeyHash, pl.Hash, want)
		case plainLines[i]["key_hash"] != pl.Hash:
			t.Errorf("key %s: logged %v without a salt, want %s", k, plainLines[i]["key_hash"], pl.Hash)
		case saltedLines[i]["key_hash"] != want:
			t.Errorf("key %s: logged %v with the salt, want %s", k, saltedLines[i]["key_hash"], want)
		case guess[want] != "":
			t.Errorf("key %s: its salted hash is the ring hash of %s", k, guess[want])
		}
		if g := guess[plainLines[i]["key_hash"].(string)]; g != k {
			t.Errorf("without a salt, the logged hash of %s should be found by brute force, found %q", k, g)
		}
	}
	hot := salted.HotKeys(false)
	if len(hot.Keys) != len(ks) {
		t.Fatalf("%d hot keys, want %d", len(hot.Keys), len(ks))
	}
	for _, hk := range hot.Keys[:5] {
		k := ks[slices.IndexFunc(ks, func(k string) bool { return xxhash.Sum64String(k) == hk.Hash })]
		if hk.Hex != keyhash.Hex(sal.Sum(hk.Hash)) || hk.Requests != 3 {
			t.Errorf("hot key %s: %s with %d requests, want %s with 3", k, hk.Hex, hk.Requests, keyhash.Hex(sal.Sum(hk.Hash)))
		}
		res, ok := salted.LookupHash(hk.Hex)
		if !ok || res.Hash != salted.Lookup(k).Hash || res.Owner != salted.Lookup(k).Owner || res.KeyHash != hk.Hex {
			t.Errorf("LookupHash(%s), the hot key %s: %+v, %v; want its placement", hk.Hex, k, res, ok)
		}
		if _, ok := salted.LookupHash(salted.Lookup(k).Hash); ok {
			t.Errorf("with a salt, LookupHash took the ring position %s", salted.Lookup(k).Hash)
		}
		if res, ok := plain.LookupHash(plain.Lookup(k).Hash); !ok || res.Owner != plain.Lookup(k).Owner {
			t.Errorf("without a salt, LookupHash(%s): %+v, %v", plain.Lookup(k).Hash, res, ok)
		}
	}
	if ph := plain.HotKeys(false); ph.Keys[0].Hex != fmt.Sprintf("%016x", ph.Keys[0].Hash) {
		t.Errorf("without a salt, a hot key shows %s for position %x", ph.Keys[0].Hex, ph.Keys[0].Hash)
	}
	if _, ok := salted.LookupHash(strings.Repeat("0", 16)); ok {
		t.Error("LookupHash took a hash no hot key has")
	}
}

// waitLines waits for n lines of an access log and returns them.
func waitLines(t *testing.T, jl *jsonLog, n int) []map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines := jl.lines(t)
		if len(lines) >= n {
			return lines
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d access log lines, want %d", len(lines), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHoldShareSalted: with a salt, the shared store's records are named
// by the salted hashes (the names hold no ring position a reader could
// brute-force), and a replica finds the records of another only when
// both have the same salt.
func TestHoldShareSalted(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	bes := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
	clk := newFakeClock()
	opts := holdOptions(upstreamsOf(t, bes...), 10*time.Minute)
	opts.Hash.Salt = []byte(testSalt)
	rs := replicas(t, 2, clk, opts, srv, "salted:")
	other := opts
	other.Hash.Salt = []byte("another-fleet-salt-99")
	rs = append(rs, replicas(t, 1, clk, other, srv, "salted:")...)

	ks := keys("user-", 20)
	for _, k := range ks {
		visit(t, rs[0].front, k)
	}
	waitWritten(t, rs[:1], uint64(len(ks)))
	sal := keyhash.New([]byte(testSalt))
	names := srv.Do("KEYS", "salted:*")
	slices.Sort(names)
	var want []string
	for _, k := range ks {
		want = append(want, "salted:"+keyhash.Hex(sal.Sum(xxhash.Sum64String(k))))
		if slices.Contains(names, "salted:"+fmt.Sprintf("%016x", xxhash.Sum64String(k))) {
			t.Errorf("key %s: its record is named by its ring hash", k)
		}
	}
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Errorf("store keys %q\nwant %q", names, want)
	}
	for _, k := range ks {
		visit(t, rs[1].front, k) // same salt: finds each record
		visit(t, rs[2].front, k) // another salt: finds none
	}
	if got := metric(t, rs[1].reg, "ringlb_hold_share_lookups_total", "result=found"); got != float64(len(ks)) {
		t.Errorf("replica with the same salt found %v records, want %d", got, len(ks))
	}
	if got := metric(t, rs[2].reg, "ringlb_hold_share_lookups_total", "result=found"); got != 0 {
		t.Errorf("replica with another salt found %v records, want 0", got)
	}
}
