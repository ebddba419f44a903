package config

// This file checks the hold block: its limits, hold.share and the hold
// cookie.

import (
	"net/url"
	"time"

	"github.com/ringlb/ringlb/balancer/hold"
	"github.com/ringlb/ringlb/balancer/hold/share"
	"github.com/ringlb/ringlb/balancer/key"
)

// validateHold checks the hold block and reads its cookie's secret file.
func (d *decoder) validateHold(c *Pool) {
	h := &c.Hold
	if h.Idle < 0 {
		d.invalid("hold.idle", "must be >= 0 (0s turns hold off), got %s", h.Idle)
	}
	if h.MaxKeys < 1 {
		d.invalid("hold.max_keys", "must be >= 1, got %d", h.MaxKeys)
	}
	if h.OnReturn != hold.Stay && h.OnReturn != hold.Home {
		d.invalid("hold.on_return", "must be stay or home, got %q", short(string(h.OnReturn)))
	}
	d.validateHoldShare(h)
	ck := &h.Cookie
	if ck.Name == "" {
		if ck.SecretFile != "" {
			d.invalid("hold.cookie.secret_file", "is set but hold.cookie.name is empty (no cookie); set a name or remove secret_file")
		}
		return
	}
	switch {
	case !isToken(ck.Name):
		d.invalid("hold.cookie.name", "must be a valid cookie name (or \"\" for no cookie), got %q", short(ck.Name))
	case c.Hash.OnMissing == "cookie" && ck.Name == c.Hash.Cookie.Name:
		d.invalid("hold.cookie.name", "%q is also hash.cookie.name; the hold cookie needs a name of its own", ck.Name)
	default:
	keys:
		for i, k := range c.Hash.Key {
			for _, p := range append([]key.Source{k}, k.Sources...) {
				if p.Kind == key.Cookie && p.Name == ck.Name {
					d.invalid("hold.cookie.name", "%q is also the cookie hash.key[%d] reads; the hold cookie needs a name of its own", ck.Name, i)
					break keys
				}
			}
		}
	}
	if ck.SecretFile == "" {
		d.invalid("hold.cookie.secret_file", "required when hold.cookie.name is set")
		return
	}
	secrets, msg := readSecrets(resolvePath(d.file, ck.SecretFile))
	if msg != "" {
		d.invalid("hold.cookie.secret_file", "%q: %s", short(ck.SecretFile), msg)
		return
	}
	ck.Secrets = secrets
}

// validateHoldShare checks hold.share and reads its password file.
func (d *decoder) validateHoldShare(h *Hold) {
	sh := &h.Share
	if sh.Redis == "" {
		if sh.PasswordFile != "" {
			d.invalid("hold.share.password_file", "is set but hold.share.redis is empty (no sharing); set redis or remove password_file")
		}
		return
	}
	if h.Idle <= 0 {
		d.invalid("hold.share.redis", "needs hold on (hold.idle > 0)")
	}
	if u, err := url.Parse(sh.Redis); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			d.invalid("hold.share.redis", "holds a password; put it in hold.share.password_file instead")
			return
		}
	}
	if err := share.Check(share.Options{Redis: sh.Redis, Timeout: time.Second}); err != nil {
		d.invalid("hold.share.redis", "want redis://[user@]host:port[/db] or rediss://...: %v", err)
	}
	if sh.Timeout <= 0 {
		d.invalid("hold.share.timeout", "must be > 0, got %s", sh.Timeout)
	}
	if sh.PasswordFile != "" {
		pw, msg := readPassword(resolvePath(d.file, sh.PasswordFile))
		if msg != "" {
			d.invalid("hold.share.password_file", "%q: %s", short(sh.PasswordFile), msg)
			return
		}
		sh.Password = pw
	}
}
