package config

// This file checks the hash block: its key sources, cookie, body limit
// and salt file.

import (
	"strings"

	"github.com/ringlb/ringlb/balancer/key"
)

// validateHash checks the hash block and reads its salt file.
func (d *decoder) validateHash(h *Hash) {
	if d.has("hash.key") && len(h.Key) == 0 {
		d.invalid("hash.key", "must list at least one source")
	}
	for i, k := range h.Key {
		d.validateKeySource(index("hash.key", i), k, h.BodyLimit)
	}
	switch h.OnMissing {
	case "random", "reject", "cookie":
	default:
		d.invalid("hash.on_missing", "must be random, reject or cookie, got %q", short(string(h.OnMissing)))
	}
	if !isToken(h.Cookie.Name) {
		d.invalid("hash.cookie.name", "must be a valid cookie name, got %q", short(h.Cookie.Name))
	}
	positive("hash.cookie.ttl", h.Cookie.TTL, d)
	if h.BodyLimit < 1 {
		d.invalid("hash.body_limit", "must be >= 1, got %d", h.BodyLimit)
	}
	if h.SaltFile != "" {
		salt, msg := readSalt(resolvePath(d.file, h.SaltFile))
		if msg != "" {
			d.invalid("hash.salt_file", "%q: %s", short(h.SaltFile), msg)
			return
		}
		h.Salt = salt
	}
}

// validateKeySource checks one hash.key entry, f being its field, under
// hash.body_limit bodyLimit.
func (d *decoder) validateKeySource(f string, k key.Source, bodyLimit int) {
	if k.Kind == "" {
		return // decoding failed and said why
	}
	nf := f + "." + string(k.Kind)
	switch {
	case k.Kind == key.Combine:
		if len(k.Sources) == 0 {
			d.invalid(nf, "must list at least one source")
		}
		for j, p := range k.Sources {
			d.validateKeySource(index(nf, j), p, bodyLimit)
		}
	case k.Kind == key.Prefix:
		bf := nf + ".bytes"
		if !d.has(bf) {
			bf = nf // written `prefix: N`
		}
		switch {
		case k.Bytes < key.MinPrefixBytes:
			d.invalid(bf, "must be >= %d, got %d", key.MinPrefixBytes, k.Bytes)
		case bodyLimit >= 1 && k.Bytes > bodyLimit:
			d.invalid(bf, "must be <= hash.body_limit (%d), got %d: the key is read from the body's first hash.body_limit bytes", bodyLimit, k.Bytes)
		}
	case k.Kind == key.JSON:
		if k.Name == "" {
			d.invalid(nf, "must not be empty")
		} else if strings.HasPrefix(k.Name, ".") || strings.HasSuffix(k.Name, ".") || strings.Contains(k.Name, "..") {
			d.invalid(nf, "must be field names joined by dots, like metadata.session, got %q", short(k.Name))
		}
	case k.Kind != key.Cookie && k.Kind != key.Header && k.Kind != key.Query:
	case k.Name == "":
		d.invalid(nf, "must not be empty")
	case (k.Kind == key.Cookie || k.Kind == key.Header) && !isToken(k.Name):
		d.invalid(nf, "must be a valid %s name, got %q", k.Kind, short(k.Name))
	}
}
