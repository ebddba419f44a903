package forward

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"net/textproto"
	"strings"
)

// loopToken is this process's entry in the CDN-Loop request header (RFC
// 8586): a pseudonym drawn at random when the process starts, shared by
// every Balancer in it. Each request ringlb forwards carries it, after
// whatever entries the client sent; a request that arrives already
// carrying it has been through this process before, so an upstream that
// points back at ringlb (static, or a discovered member that resolves to
// its own listener) costs one extra hop, not a loop that runs until a
// header limit ends it.
var loopToken = newLoopToken()

// loopValue is the outbound CDN-Loop value of a request that had none; a
// capped one-element slice, so an append elsewhere copies.
var loopValue = []string{loopToken}

func newLoopToken() string {
	var b [8]byte
	rand.Read(b[:])
	return "ringlb-" + hex.EncodeToString(b[:])
}

// LoopToken returns this process's CDN-Loop pseudonym.
func LoopToken() string { return loopToken }

// Looped reports whether h's CDN-Loop entries include this process's.
// Each entry is a cdn-id, optionally followed by ";" parameters.
func Looped(h http.Header) bool {
	for _, v := range h["Cdn-Loop"] {
		if !strings.Contains(v, loopToken) {
			continue
		}
		for entry := range strings.SplitSeq(v, ",") {
			id, _, _ := strings.Cut(entry, ";")
			if textproto.TrimString(id) == loopToken {
				return true
			}
		}
	}
	return false
}

// SetLoop adds this process's entry to the outbound CDN-Loop header,
// after the client's entries (joined into one value).
func SetLoop(out http.Header, in http.Header) {
	if prior := in["Cdn-Loop"]; len(prior) > 0 {
		out["Cdn-Loop"] = []string{strings.Join(prior, ", ") + ", " + loopToken}
		return
	}
	out["Cdn-Loop"] = loopValue[:1:1]
}
