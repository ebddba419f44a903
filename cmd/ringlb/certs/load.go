// Package certs holds the proxy listener's TLS certificate: it loads a
// certificate and key pair from PEM files, serves the current pair to new
// handshakes through tls.Config.GetCertificate, reloads it on demand or when
// either file changes on disk (a Kubernetes Secret's symlink swap included),
// and keeps the old pair whenever a new one does not load. It also loads the
// CA file that https upstreams are verified against, and builds the
// listener's tls.Config and http.Protocols from the config's settings.
//
// Typical use:
//
//	st, err := certs.NewStore(certFile, keyFile)        // fails if the pair does not load
//	srv.TLSConfig = certs.ServerTLSConfig(st, minVersion, true)
//	go st.Watch(ctx, certs.WatchOptions{OnReload: logIt}) // notice changes on disk
//	...
//	err = st.Reload()                                     // SIGHUP, POST /reload
//
// Open connections keep the certificate they were made with; only new
// handshakes see a new one.
package certs

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"time"
)

// The config fields a FileError names.
const (
	FieldCertFile = "tls.cert_file"
	FieldKeyFile  = "tls.key_file"
	FieldCAFile   = "upstream_tls.ca_file"
)

// maxFileSize bounds what is read from a PEM file: far above any real
// chain or key, it keeps a misconfigured path (a device, a log file) from
// being read without end.
const maxFileSize = 1 << 20

// FileError is a file of a certificate, key or CA that cannot be used.
// Field says which of the config's fields named it: FieldCertFile,
// FieldKeyFile or FieldCAFile.
type FileError struct {
	Field string
	Path  string
	Msg   string // what is wrong, e.g. "no PEM certificate in it"
	Err   error  // the underlying error, if any
}

// Error returns "FIELD: PATH: MSG".
func (e *FileError) Error() string { return e.Field + ": " + e.Path + ": " + e.Msg }

// Unwrap returns the underlying error (an *fs.PathError for a file that
// cannot be read).
func (e *FileError) Unwrap() error { return e.Err }

// readFile reads a regular file (after following symlinks) of at most
// maxFileSize bytes; anything else (a directory, a device, a FIFO) is
// refused without being opened.
func readFile(field, path string) ([]byte, error) {
	fail := func(err error) error {
		reason := err
		var pe *fs.PathError
		if errors.As(err, &pe) {
			reason = pe.Err
		}
		return &FileError{Field: field, Path: path, Msg: "cannot read: " + reason.Error(), Err: err}
	}
	// Stat before opening: opening a FIFO would block until a writer came.
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fail(err)
	}
	if !fi.Mode().IsRegular() {
		return nil, &FileError{Field: field, Path: path, Msg: "cannot read: not a regular file"}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fail(err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fail(err)
	}
	if len(data) > maxFileSize {
		return nil, &FileError{Field: field, Path: path, Msg: fmt.Sprintf("larger than %d bytes; not a PEM file", maxFileSize)}
	}
	return data, nil
}

// parseCertificates parses every CERTIFICATE block of PEM data, in order.
func parseCertificates(field, path string, data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, &FileError{Field: field, Path: path, Msg: fmt.Sprintf("certificate %d: %v", len(certs)+1, err), Err: err}
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, &FileError{Field: field, Path: path, Msg: "no PEM certificate in it"}
	}
	return certs, nil
}

// LoadKeyPair reads a PEM certificate chain (leaf first) and its private
// key. It fails with a *FileError naming FieldCertFile when the chain
// cannot be read or parsed, and FieldKeyFile when the key cannot be read,
// parsed, or does not match the leaf. Expiry is not checked here: an
// expired certificate still loads (see Expired). The result's Leaf is set.
func LoadKeyPair(certFile, keyFile string) (*tls.Certificate, error) {
	certPEM, err := readFile(FieldCertFile, certFile)
	if err != nil {
		return nil, err
	}
	chain, err := parseCertificates(FieldCertFile, certFile, certPEM)
	if err != nil {
		return nil, err
	}
	keyPEM, err := readFile(FieldKeyFile, keyFile)
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(keyPEM, []byte("PRIVATE KEY-----")) {
		return nil, &FileError{Field: FieldKeyFile, Path: keyFile, Msg: "no PEM private key in it"}
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		msg := err.Error()
		if keyParses(keyPEM) {
			msg = "does not match the certificate in " + certFile
		}
		return nil, &FileError{Field: FieldKeyFile, Path: keyFile, Msg: msg, Err: err}
	}
	pair.Leaf = chain[0]
	return &pair, nil
}

// keyParses reports whether the first PRIVATE KEY block of PEM data parses
// in one of the forms crypto/tls accepts, so that a pair that fails to load
// fails because key and certificate do not match.
func keyParses(data []byte) bool {
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			return false
		}
		if !strings.HasSuffix(b.Type, "PRIVATE KEY") {
			continue
		}
		_, err1 := x509.ParsePKCS1PrivateKey(b.Bytes)
		_, err8 := x509.ParsePKCS8PrivateKey(b.Bytes)
		_, errEC := x509.ParseECPrivateKey(b.Bytes)
		return err1 == nil || err8 == nil || errEC == nil
	}
}

// LoadCAFile reads PEM root certificates for verifying upstreams. A file
// that cannot be read, or holds no certificate, is a *FileError naming
// FieldCAFile.
func LoadCAFile(path string) (*x509.CertPool, error) {
	data, err := readFile(FieldCAFile, path)
	if err != nil {
		return nil, err
	}
	certs, err := parseCertificates(FieldCAFile, path, data)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool, nil
}

// Expired says why leaf is not valid at now ("expired at ...", "not valid
// until ..."), or returns "" when it is.
func Expired(leaf *x509.Certificate, now time.Time) string {
	switch {
	case now.After(leaf.NotAfter):
		return "certificate " + Subject(leaf) + " expired at " + leaf.NotAfter.UTC().Format(time.RFC3339)
	case now.Before(leaf.NotBefore):
		return "certificate " + Subject(leaf) + " is not valid until " + leaf.NotBefore.UTC().Format(time.RFC3339)
	}
	return ""
}

// Subject names a certificate for people: its subject's common name, or
// else its first DNS name, or else its whole subject.
func Subject(c *x509.Certificate) string {
	switch {
	case c.Subject.CommonName != "":
		return c.Subject.CommonName
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	}
	return c.Subject.String()
}
