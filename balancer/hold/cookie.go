package hold

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"sync"
	"time"
)

// Cookie is the content of a hold cookie: the key's ring hash, the upstream
// it is held on, the ring version the hold was made under, and when it
// expires (the last use plus idle; millisecond precision).
type Cookie struct {
	Key      uint64
	Upstream string
	Version  Version
	Expires  time.Time
}

// NewCookie returns the cookie for a key held on upstream under version v,
// used at now: it expires at now + idle.
func NewCookie(key uint64, upstream string, v Version, now time.Time, idle time.Duration) Cookie {
	return Cookie{Key: key, Upstream: upstream, Version: v, Expires: now.Add(idle).Truncate(time.Millisecond)}
}

// Rec returns the cookie as a record for Rule.Decide: its last use is
// idle before its expiry (at most now), on the monotonic clock whose
// current reading is mono.
func (c Cookie) Rec(now time.Time, mono int64, idle time.Duration) Rec {
	left := min(c.Expires.Sub(now), idle)
	return Rec{Upstream: c.Upstream, Version: c.Version, LastUse: mono - int64(idle-left)}
}

// NeedSet reports whether a response should set the hold cookie, the hold
// now being upstream under version v: when the request carried no valid
// cookie for its key (ok false), when its cookie names another upstream or
// version, or when more than half of idle has passed since it was set (it
// expires within idle/2). Steady traffic thus sets it about twice per idle.
func NeedSet(have Cookie, ok bool, upstream string, v Version, now time.Time, idle time.Duration) bool {
	return !ok || have.Upstream != upstream || have.Version != v || have.Expires.Sub(now) < idle/2
}

// Cookie wire format, before base64 (raw URL alphabet, no padding):
//
//	format(1) = 1 | key(8) | expires, Unix ms(8) | version(8) | upstream(1-255) | HMAC-SHA256(32)
//
// integers big-endian; the MAC covers every byte before it. The key is
// sent in clear so that a cookie made for another key (a browser sends the
// cookie with every request, whatever its key) is set aside without
// computing a MAC.
const (
	cookieFormat  = 1
	headerLen     = 1 + 8 + 8 + 8
	macLen        = sha256.Size
	maxUpstream   = 255
	minCookieLen  = headerLen + 1 + macLen
	maxCookieLen  = headerLen + maxUpstream + macLen
	maxEncodedLen = (maxCookieLen*8 + 5) / 6
)

// cookieEncoding is base64 with the URL alphabet and no padding; strict,
// so that every cookie has exactly one encoding.
var cookieEncoding = base64.RawURLEncoding.Strict()

// MinSecretLen is the shortest secret a Codec accepts.
const MinSecretLen = 32

// Codec signs and verifies hold cookies. The first secret signs; every
// secret verifies, so replicas can be moved to a new secret one at a time:
// add the new secret as the second line everywhere, then make it the first
// everywhere, then remove the old one. It is safe for concurrent use.
type Codec struct {
	macs []sync.Pool // one per secret, of hash.Hash (HMAC-SHA256 keyed with it)
}

// NewCodec returns a codec for secrets (the first signs). It fails when
// there is no secret or one is shorter than MinSecretLen bytes.
func NewCodec(secrets [][]byte) (*Codec, error) {
	if len(secrets) == 0 {
		return nil, errors.New("hold cookie: no secret")
	}
	c := &Codec{macs: make([]sync.Pool, len(secrets))}
	for i, s := range secrets {
		if len(s) < MinSecretLen {
			return nil, fmt.Errorf("hold cookie: secret %d is %d bytes, want at least %d", i+1, len(s), MinSecretLen)
		}
		key := append([]byte(nil), s...)
		c.macs[i].New = func() any { return hmac.New(sha256.New, key) }
	}
	return c, nil
}

// sum appends the MAC of msg under secret i to dst.
func (c *Codec) sum(i int, dst, msg []byte) []byte {
	h := c.macs[i].Get().(hash.Hash)
	h.Reset()
	h.Write(msg)
	dst = h.Sum(dst)
	c.macs[i].Put(h)
	return dst
}

// Encode returns the cookie's value, signed with the first secret. An
// upstream name longer than 255 bytes, or empty, gives "" (no cookie):
// upstream names are far shorter.
func (c *Codec) Encode(ck Cookie) string {
	if ck.Upstream == "" || len(ck.Upstream) > maxUpstream {
		return ""
	}
	var buf [maxCookieLen]byte
	b := append(buf[:0], cookieFormat)
	b = binary.BigEndian.AppendUint64(b, ck.Key)
	b = binary.BigEndian.AppendUint64(b, uint64(ck.Expires.UnixMilli()))
	b = binary.BigEndian.AppendUint64(b, uint64(ck.Version))
	b = append(b, ck.Upstream...)
	b = c.sum(0, b, b)
	return cookieEncoding.EncodeToString(b)
}

// Decode returns the cookie in value if it is well formed, made for key,
// not expired at now, and signed with one of the secrets (compared in
// constant time). Anything else gives false, never an error: a bad cookie
// is ignored.
func (c *Codec) Decode(value string, key uint64, now time.Time) (Cookie, bool) {
	if len(value) < (minCookieLen*8+5)/6 || len(value) > maxEncodedLen {
		return Cookie{}, false
	}
	var buf [maxCookieLen]byte
	n, err := cookieEncoding.Decode(buf[:], []byte(value))
	if err != nil || n < minCookieLen {
		return Cookie{}, false
	}
	b := buf[:n]
	if b[0] != cookieFormat || binary.BigEndian.Uint64(b[1:9]) != key {
		return Cookie{}, false
	}
	expires := time.UnixMilli(int64(binary.BigEndian.Uint64(b[9:17])))
	if !now.Before(expires) {
		return Cookie{}, false
	}
	msg, mac := b[:n-macLen], b[n-macLen:]
	var sum [macLen]byte
	valid := false
	for i := range c.macs {
		if hmac.Equal(c.sum(i, sum[:0], msg), mac) {
			valid = true
			break
		}
	}
	if !valid {
		return Cookie{}, false
	}
	return Cookie{
		Key:      key,
		Upstream: string(msg[headerLen:]),
		Version:  Version(binary.BigEndian.Uint64(b[17:25])),
		Expires:  expires,
	}, true
}
