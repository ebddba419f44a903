package hold

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

var (
	secretA = []byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-first")
	secretB = []byte("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-second")
	t0      = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
)

func mustCodec(t testing.TB, secrets ...[]byte) *Codec {
	t.Helper()
	c, err := NewCodec(secrets)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCookieRoundTrip(t *testing.T) {
	c := mustCodec(t, secretA)
	ck := NewCookie(0xdeadbeefcafe1234, "app-7.cache.svc:8080", VersionOf("0123456789ab"), t0, 10*time.Minute)
	v := c.Encode(ck)
	if strings.ContainsAny(v, "=+/ ;,\"") {
		t.Fatalf("cookie value %q is not URL-safe base64 without padding", v)
	}
	got, ok := c.Decode(v, ck.Key, t0.Add(time.Minute))
	if !ok || got.Key != ck.Key || got.Upstream != ck.Upstream || got.Version != ck.Version || !got.Expires.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("Decode = %+v, %v; want %+v", got, ok, ck)
	}
	// Compact: 25 bytes of header, the name and a 32-byte MAC.
	if want := (25 + len(ck.Upstream) + 32) * 4 / 3; len(v) > want+1 {
		t.Errorf("len = %d, want about %d", len(v), want)
	}
}

func TestCookieRejected(t *testing.T) {
	c := mustCodec(t, secretA)
	const key = 42
	ck := NewCookie(key, "app-1", VersionOf("v1"), t0, time.Minute)
	good := c.Encode(ck)
	now := t0.Add(30 * time.Second)
	if _, ok := c.Decode(good, key, now); !ok {
		t.Fatal("good cookie rejected")
	}

	t.Run("every byte tampered", func(t *testing.T) {
		const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
		for i := range len(good) {
			for _, r := range []byte{alphabet[(strings.IndexByte(alphabet, good[i])+1)%64], alphabet[(strings.IndexByte(alphabet, good[i])+32)%64], '.', '='} {
				v := good[:i] + string(r) + good[i+1:]
				if got, ok := c.Decode(v, key, now); ok {
					t.Fatalf("byte %d changed to %q: accepted as %+v", i, r, got)
				}
			}
		}
		// Every bit of the decoded form, too (re-encoded).
		raw, _ := cookieEncoding.DecodeString(good)
		for i := range raw {
			for bit := range 8 {
				b := bytes.Clone(raw)
				b[i] ^= 1 << bit
				if _, ok := c.Decode(cookieEncoding.EncodeToString(b), key, now); ok {
					t.Fatalf("byte %d bit %d flipped: accepted", i, bit)
				}
			}
		}
	})
	t.Run("truncated or extended", func(t *testing.T) {
		for i := range len(good) {
			if _, ok := c.Decode(good[:i], key, now); ok {
				t.Fatalf("prefix of %d chars accepted", i)
			}
		}
		if _, ok := c.Decode(good+"A", key, now); ok {
			t.Fatal("extended cookie accepted")
		}
	})
	t.Run("expired", func(t *testing.T) {
		if _, ok := c.Decode(good, key, t0.Add(time.Minute-time.Millisecond)); !ok {
			t.Fatal("rejected just before expiry")
		}
		if _, ok := c.Decode(good, key, t0.Add(time.Minute)); ok {
			t.Fatal("accepted at expiry")
		}
	})
	t.Run("other key", func(t *testing.T) {
		if _, ok := c.Decode(good, key+1, now); ok {
			t.Fatal("honoured for another key")
		}
	})
	t.Run("foreign secret", func(t *testing.T) {
		if _, ok := mustCodec(t, secretB).Decode(good, key, now); ok {
			t.Fatal("honoured under another secret")
		}
	})
	t.Run("malformed", func(t *testing.T) {
		for _, v := range []string{"", "x", "not base64 at all!", strings.Repeat("A", 100), strings.Repeat("A", 5000), good[:len(good)-1] + "\n"} {
			if _, ok := c.Decode(v, key, now); ok {
				t.Fatalf("%q accepted", v)
			}
		}
	})
	t.Run("unencodable", func(t *testing.T) {
		if v := c.Encode(NewCookie(key, "", 1, t0, time.Minute)); v != "" {
			t.Errorf("empty upstream encoded as %q", v)
		}
		if v := c.Encode(NewCookie(key, strings.Repeat("u", 256), 1, t0, time.Minute)); v != "" {
			t.Errorf("256-byte upstream encoded as %q", v)
		}
		if v := c.Encode(NewCookie(key, strings.Repeat("u", 255), 1, t0, time.Minute)); v == "" {
			t.Errorf("255-byte upstream not encoded")
		} else if got, ok := c.Decode(v, key, now); !ok || len(got.Upstream) != 255 {
			t.Errorf("255-byte upstream: %v", ok)
		}
	})
}

// Rotation: the first secret signs, every secret verifies, so replicas can
// move to a new secret one at a time.
func TestCookieRotation(t *testing.T) {
	const key = 7
	now := t0.Add(time.Second)
	oldOnly := mustCodec(t, secretA)
	both := mustCodec(t, secretB, secretA) // new first, old still verifies
	newOnly := mustCodec(t, secretB)
	ck := NewCookie(key, "app-1", 9, t0, time.Minute)

	fromOld := oldOnly.Encode(ck)
	if _, ok := both.Decode(fromOld, key, now); !ok {
		t.Error("a replica with [new, old] rejects a cookie signed with old")
	}
	if _, ok := newOnly.Decode(fromOld, key, now); ok {
		t.Error("a replica with [new] accepts a cookie signed with old")
	}
	fromBoth := both.Encode(ck)
	if fromBoth == fromOld {
		t.Error("[new, old] signs with old")
	}
	if _, ok := newOnly.Decode(fromBoth, key, now); !ok {
		t.Error("[new] rejects a cookie signed by [new, old]")
	}
	if _, ok := mustCodec(t, secretA, secretB).Decode(fromBoth, key, now); !ok {
		t.Error("[old, new] rejects a cookie signed with new")
	}
	if _, ok := oldOnly.Decode(fromBoth, key, now); ok {
		t.Error("[old] accepts a cookie signed with new")
	}
}

func TestNewCodecErrors(t *testing.T) {
	if _, err := NewCodec(nil); err == nil {
		t.Error("no secret accepted")
	}
	if _, err := NewCodec([][]byte{secretA, []byte("short")}); err == nil || !strings.Contains(err.Error(), "secret 2 is 5 bytes") {
		t.Errorf("short secret: %v", err)
	}
}

func TestNeedSet(t *testing.T) {
	const idle = 10 * time.Minute
	set := NewCookie(1, "a", 5, t0, idle)
	for _, tt := range []struct {
		name     string
		have     Cookie
		ok       bool
		upstream string
		v        Version
		now      time.Time
		want     bool
	}{
		{"no cookie", Cookie{}, false, "a", 5, t0, true},
		{"same, just set", set, true, "a", 5, t0.Add(time.Second), false},
		{"same, less than half of idle passed", set, true, "a", 5, t0.Add(idle / 2), false},
		{"same, more than half of idle passed", set, true, "a", 5, t0.Add(idle/2 + time.Millisecond), true},
		{"other upstream", set, true, "b", 5, t0.Add(time.Second), true},
		{"other version", set, true, "a", 6, t0.Add(time.Second), true},
	} {
		if got := NeedSet(tt.have, tt.ok, tt.upstream, tt.v, tt.now, idle); got != tt.want {
			t.Errorf("%s: NeedSet = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// A cookie as a record: it was last used idle before it expires, and
// Rule.Decide treats it like the store's records.
func TestCookieRec(t *testing.T) {
	const idle = 10 * time.Minute
	ck := NewCookie(1, "a", 5, t0, idle)
	mono := int64(1e15)
	r := ck.Rec(t0.Add(3*time.Minute), mono, idle)
	if r.Upstream != "a" || r.Version != 5 || r.LastUse != mono-int64(3*time.Minute) {
		t.Fatalf("Rec = %+v, want last use 3m ago", r)
	}
	// A cookie set under a longer idle (since shortened) counts as just used.
	r = NewCookie(1, "a", 5, t0, time.Hour).Rec(t0, mono, idle)
	if r.LastUse != mono {
		t.Fatalf("LastUse = %d, want %d", r.LastUse, mono)
	}
	rule := Rule{Idle: idle}
	ready := func(string) Standing { return Ready }
	if d := rule.Decide(ck.Rec(t0.Add(idle-time.Millisecond), mono, idle), true, 6, mono, ready); d.Outcome != Hold {
		t.Errorf("cookie 1ms before expiry: %+v", d)
	}
}

func FuzzCookieDecode(f *testing.F) {
	c := mustCodec(f, secretA, secretB)
	good := c.Encode(NewCookie(42, "app-1", 3, t0, time.Hour))
	f.Add(good, uint64(42))
	f.Add(good[:20], uint64(42))
	f.Add("", uint64(0))
	f.Add(strings.Repeat("_", 420), uint64(1))
	f.Fuzz(func(t *testing.T, v string, key uint64) {
		ck, ok := c.Decode(v, key, t0)
		if !ok {
			return
		}
		// Accepted: for this key, not expired, and the canonical encoding.
		if ck.Key != key || !t0.Before(ck.Expires) || ck.Upstream == "" {
			t.Fatalf("accepted %q as %+v", v, ck)
		}
		if again := c.Encode(ck); again != v {
			t.Fatalf("accepted %q, which re-encodes as %q", v, again)
		}
	})
}
