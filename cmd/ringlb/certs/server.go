package certs

import (
	"crypto/tls"
	"net/http"
)

// ListenerOptions are the proxy listener's protocol settings, as the
// config's tls, http2 and h2c give them.
type ListenerOptions struct {
	// Store serves the certificate; nil means no TLS (plain HTTP).
	Store *Store
	// MinVersion is tls.VersionTLS12 or tls.VersionTLS13; 0 means 1.2.
	MinVersion uint16
	// HTTP2, with TLS, offers h2 beside http/1.1 by ALPN.
	HTTP2 bool
	// H2C, without TLS, also accepts cleartext HTTP/2 with prior
	// knowledge (the client's connection preface) beside HTTP/1.1. The
	// config forbids it with TLS; here it is ignored then.
	H2C bool
}

// Protocols returns what an http.Server on the listener speaks: HTTP/1.1
// always; HTTP/2 over TLS when TLS and HTTP2 are set; cleartext HTTP/2 with
// prior knowledge when there is no TLS and H2C is set. Upgrade from
// HTTP/1.1 to h2c (the "Upgrade: h2c" dance, dropped by RFC 9113) is not
// offered.
func (o ListenerOptions) Protocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	if o.Store != nil {
		p.SetHTTP2(o.HTTP2)
	} else {
		p.SetUnencryptedHTTP2(o.H2C)
	}
	return p
}

// TLSConfig returns the listener's tls.Config, or nil without TLS. The
// certificate comes from the Store on every handshake, so a reload needs
// no new config; NextProtos lists h2 (when HTTP2) then http/1.1, as
// http.Server would set them from Protocols, so the config also works
// with a listener made by tls.NewListener.
func (o ListenerOptions) TLSConfig() *tls.Config {
	if o.Store == nil {
		return nil
	}
	version := o.MinVersion
	if version == 0 {
		version = tls.VersionTLS12
	}
	next := []string{"http/1.1"}
	if o.HTTP2 {
		next = []string{"h2", "http/1.1"}
	}
	return &tls.Config{
		MinVersion:     version,
		GetCertificate: o.Store.GetCertificate,
		NextProtos:     next,
	}
}
