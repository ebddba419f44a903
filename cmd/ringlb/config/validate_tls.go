package config

// This file checks tls, http2, h2c and a pool's upstream_tls.

import (
	"net/netip"
	"strings"
)

// validateTLS checks tls, http2 and h2c; the files tls names are read by
// checkFiles.
func (d *decoder) validateTLS(c *Config) {
	if t := c.TLS; t != nil {
		for _, f := range [...]struct {
			field string
			val   string
		}{{"tls.cert_file", t.CertFile}, {"tls.key_file", t.KeyFile}} {
			switch {
			case !d.has(f.field):
				d.invalid(f.field, "required with tls")
			case f.val == "":
				d.invalid(f.field, "must not be empty")
			}
		}
	}
	if c.H2C && !d.isBad("h2c") {
		switch {
		case c.TLS != nil:
			d.invalid("h2c", "must be false with tls: cleartext HTTP/2 is for listeners without TLS (over TLS, http2 offers h2 by ALPN)")
		case !c.HTTP2 && !d.isBad("http2"):
			d.invalid("h2c", "must be false with http2: false, which turns HTTP/2 off")
		}
	}
}

// validateUpstreamTLS checks a pool's upstream_tls; its CA file is read by
// checkFiles.
func (d *decoder) validateUpstreamTLS(u *UpstreamTLS) {
	if u.InsecureSkipVerify && u.CAFile != "" {
		d.invalid("upstream_tls.insecure_skip_verify", "must be false with upstream_tls.ca_file, which it would ignore")
	}
	if u.ServerName != "" && !validServerName(u.ServerName) {
		d.invalid("upstream_tls.server_name", "must be a host name or IP address, got %q", short(u.ServerName))
	}
}

// validServerName reports whether s can be sent as SNI and verified: an IP
// address or a DNS name of letters, digits, '-', '_' and '.' (a leading
// "*." is not a name a server has).
func validServerName(s string) bool {
	if _, err := netip.ParseAddr(s); err == nil {
		return true
	}
	if len(s) > 253 || strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, "..") {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}
