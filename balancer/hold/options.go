package hold

import (
	"errors"
	"fmt"
	"time"

	"github.com/ringlb/ringlb/balancer/hold/share"
)

// Options is the hold block (routing rule 11), as the config file writes
// it and the balancer reads it: the config decodes into it by the yaml
// tags and sets the defaults the default tags give. Its zero value (Idle
// 0) turns hold off, which costs the request path one nil check.
type Options struct {
	// Idle is hold.idle; default 0s, which turns hold off. A key served
	// within Idle under another ring version stays on the upstream that
	// served it across a membership change.
	Idle time.Duration `yaml:"idle"`
	// MaxKeys is hold.max_keys; default 1000000; >= 1 (the balancer
	// counts values below 1 as 1). It bounds the records this process
	// keeps: beyond it the least recently used keys are forgotten.
	MaxKeys int `yaml:"max_keys" default:"1000000"`
	// Cookie is hold.cookie: the signed cookie that carries a key's hold
	// to every replica sharing the secret.
	Cookie CookieOptions `yaml:"cookie"`
	// Share is hold.share: when Share.Redis is set, the records are
	// shared with the other replicas through a Redis server (routing
	// rule 14; see package share). Its Idle, Salt, Logger and Counters
	// are the balancer's.
	Share share.Options `yaml:"share"`
	// OnReturn is hold.on_return; default stay (the balancer takes ""
	// for stay too): when the upstream the ring prefers for a key comes
	// back (ready after drain or maint, readmitted after an ejection), a
	// key in use elsewhere stays there until it goes idle. home: exactly
	// that upstream's keys return to it, in use or not.
	OnReturn OnReturn `yaml:"on_return" default:"stay"`
}

// On reports whether hold is turned on (Idle > 0).
func (o Options) On() bool { return o.Idle > 0 }

// CookieOptions is hold.cookie. The cookie's Secure and HttpOnly
// attributes are the affinity cookie's (hash.cookie).
type CookieOptions struct {
	// Name is the cookie's name; default "", meaning no cookie: the hold
	// is per process. Else a valid cookie name distinct from the cookies
	// the key is read from.
	Name string `yaml:"name"`
	// SecretFile is the path of the secret file as written; default "".
	// Required when Name is set; a relative path is read from the config
	// file's directory.
	SecretFile string `yaml:"secret_file"`
	// Secrets are the secret file's non-blank lines, surrounding spaces
	// and tabs removed, in file order, each at least MinSecretLen bytes:
	// the first signs, all verify. Read when the config is loaded (and on
	// every reload); nil when Name is "".
	Secrets [][]byte
}

// Settings is what Compile derives from Options, in the form the request
// path reads; a zero Rule.Idle means hold is off.
type Settings struct {
	Rule    Rule
	MaxKeys int    // >= 1
	Cookie  string // the hold cookie's name; "" for none
	Codec   *Codec // nil without a cookie
	// Secure and HTTPOnly are the cookie's attributes: the balancer sets
	// them to the affinity cookie's.
	Secure, HTTPOnly bool
	Share            share.Options // Redis "": records stay in this process
}

// Compile validates the hold block; fail is on_unavailable fail, under
// which a held key's owner is its held upstream.
func Compile(o Options, fail bool) (Settings, error) {
	if o.Idle < 0 {
		return Settings{}, fmt.Errorf("hold idle must be >= 0, got %v", o.Idle)
	}
	if o.Idle == 0 {
		return Settings{}, nil
	}
	switch o.OnReturn {
	case "", Stay, Home:
	default:
		return Settings{}, fmt.Errorf("hold on_return: unknown value %q", o.OnReturn)
	}
	hs := Settings{Rule: Rule{Idle: o.Idle, Fail: fail, Home: o.OnReturn == Home}, MaxKeys: max(o.MaxKeys, 1)}
	if o.Cookie.Name != "" {
		c, err := NewCodec(o.Cookie.Secrets)
		if err != nil {
			return Settings{}, err
		}
		hs.Cookie, hs.Codec = o.Cookie.Name, c
	} else if len(o.Cookie.Secrets) > 0 {
		return Settings{}, errors.New("hold secrets given without a cookie name")
	}
	if o.Share.Redis != "" {
		if err := share.Check(o.Share); err != nil {
			return Settings{}, fmt.Errorf("hold share: %w", err)
		}
		hs.Share = o.Share
		hs.Share.Idle = o.Idle
	}
	return hs, nil
}
