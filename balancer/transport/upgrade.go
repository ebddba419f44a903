package transport

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
)

// upgradeError is a 101 response ReverseProxy would refuse: its Upgrade
// header names another protocol than the request's. byClient says the
// client caused it: it asked for a list of protocols ("websocket, foo",
// which ReverseProxy compares as one string) and the upstream chose one
// of them, as RFC 9110 lets it. Then neither the breaker nor a retry
// sees it; otherwise the upstream misbehaved and it is a failure.
type upgradeError struct {
	asked, got string
	byClient   bool
}

func (e *upgradeError) Error() string {
	return fmt.Sprintf("upstream switched to protocol %q when %q was requested", e.got, e.asked)
}

// CheckUpgrade applies ReverseProxy's rule for a 101 (the response's
// Upgrade must equal the request's, ignoring case, and be printable) so
// that a refused switch is judged here, and its connection closed at once
// (ReverseProxy closes the body of a response ModifyResponse rejects, but
// not of one it refuses itself).
func CheckUpgrade(res *http.Response) error {
	if res.Request == nil {
		return nil
	}
	asked, got := UpgradeType(res.Request.Header), UpgradeType(res.Header)
	if strings.EqualFold(asked, got) && printable(got) {
		return nil
	}
	e := &upgradeError{asked: asked, got: got}
	if got != "" && printable(got) {
		for _, tok := range strings.Split(asked, ",") {
			if strings.EqualFold(textproto.TrimString(tok), got) {
				e.byClient = true
			}
		}
	}
	return e
}

// UpgradeType is the protocol a message's Upgrade header asks for, when
// its Connection header lists "upgrade"; as ReverseProxy reads it.
func UpgradeType(h http.Header) string {
	for _, v := range h["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(textproto.TrimString(tok), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// ByClient reports whether err is the client's doing (see upgradeError):
// it neither feeds the breaker nor is retried.
func ByClient(err error) bool {
	var ue *upgradeError
	return errors.As(err, &ue) && ue.byClient
}
