package config

import (
	"errors"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/certs"
)

// checkFiles loads the files the config names, as serving would: the
// certificate and key of tls and the CA file of upstream_tls. A file that
// cannot be read or parsed, a key that does not match its certificate and
// a CA file holding no certificate are problems of the field naming the
// file. A certificate that has expired, or is not valid yet, at now is
// recorded in c.Expired instead: it still loads.
func (d *decoder) checkFiles(c *Config, now time.Time) {
	if t := c.TLS; t != nil && t.CertFile != "" && t.KeyFile != "" && !d.isBad("tls.cert_file") && !d.isBad("tls.key_file") {
		pair, err := certs.LoadKeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			d.fileError(err)
		} else if msg := certs.Expired(pair.Leaf, now); msg != "" {
			at := d.lineOf("tls.cert_file")
			c.Expired = append(c.Expired, &FieldError{File: d.file, Line: at.line, Field: "tls.cert_file", Msg: msg, col: at.col})
		}
	}
	for _, p := range c.Serving() {
		pd := d.inPool(c, p)
		if f := p.UpstreamTLS.CAFile; f != "" && !pd.isBad("upstream_tls.ca_file") {
			if _, err := certs.LoadCAFile(f); err != nil {
				pd.fileError(err)
			}
		}
	}
}

// fileError records a *certs.FileError as a problem of the field it names.
func (d *decoder) fileError(err error) {
	var fe *certs.FileError
	if !errors.As(err, &fe) { // certs returns only *FileError; never lose a problem
		fe = &certs.FileError{Field: "tls", Msg: err.Error()}
	}
	f := fe.Field
	d.invalid(f, "%s: %s", fe.Path, fe.Msg)
	if e := d.errs[len(d.errs)-1]; e.Field == d.prefix+f {
		e.err = err
	}
}
