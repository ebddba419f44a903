package certs

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"sync"
	"sync/atomic"
	"time"
)

// Store holds the certificate the proxy listener serves. The current pair
// sits behind an atomic pointer: GetCertificate, called on every
// handshake, takes no lock, and a reload swaps the pointer, so new
// handshakes see the new pair while open connections keep the one they
// were made with. A reload that fails leaves the current pair in place.
//
// A Store must be made with NewStore.
type Store struct {
	certFile, keyFile string

	cur atomic.Pointer[served]

	mu    sync.Mutex // serialises reloads
	files *Files     // the pair's files, as they were when last read (under mu)
}

// served is one loaded pair with what is shown about it.
type served struct {
	cert *tls.Certificate
	info Info
}

// Info describes a served certificate for the status page, the expiry
// metric and log lines.
type Info struct {
	Subject   string // see Subject
	DNSNames  []string
	Serial    string // hexadecimal
	NotBefore time.Time
	NotAfter  time.Time
}

func infoOf(c *x509.Certificate) Info {
	return Info{
		Subject:   Subject(c),
		DNSNames:  c.DNSNames,
		Serial:    c.SerialNumber.Text(16),
		NotBefore: c.NotBefore,
		NotAfter:  c.NotAfter,
	}
}

// NewStore loads the pair at certFile and keyFile (see LoadKeyPair) and
// returns a Store serving it, or the *FileError saying why it does not
// load.
func NewStore(certFile, keyFile string) (*Store, error) {
	s := &Store{certFile: certFile, keyFile: keyFile, files: NewFiles(certFile, keyFile)}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Files returns the certificate and key paths the Store reads.
func (s *Store) Files() (certFile, keyFile string) { return s.certFile, s.keyFile }

// Reload reads the pair again. On success new handshakes get it; on
// failure the current pair stays and the error is a *FileError naming
// FieldCertFile or FieldKeyFile. Reloads are serialised; handshakes are
// never blocked by one.
func (s *Store) Reload() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reloadLocked(s.files.Stat())
}

// reloadLocked loads the pair; st is the files' state taken before they
// were read, so that a change made while reading is noticed on the next
// look.
func (s *Store) reloadLocked(st Stamps) error {
	s.files.Mark(st)
	pair, err := LoadKeyPair(s.certFile, s.keyFile)
	if err != nil {
		return err
	}
	s.cur.Store(&served{cert: pair, info: infoOf(pair.Leaf)})
	return nil
}

// GetCertificate returns the current pair, for tls.Config.GetCertificate.
func (s *Store) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cur.Load().cert, nil
}

// Info describes the current pair's leaf certificate.
func (s *Store) Info() Info { return s.cur.Load().info }

// WatchOptions tune Store.Watch. Zero values: Interval 2s, no callback.
type WatchOptions struct {
	// Interval is how often both files are looked at (os.Stat only; they
	// are read when one has changed).
	Interval time.Duration
	// OnReload, if set, is called after every reload a change triggered,
	// with the error (nil on success; the pair stays on failure) and the
	// Info of the pair now served. It runs on the watching goroutine.
	OnReload func(err error, now Info)

	tick <-chan time.Time // if set, replaces the ticker (tests)
}

// Watch reloads the pair whenever either file changes on disk (as Files
// tells changes: once they look the same on two looks in a row, or were
// last modified an Interval ago), until ctx is done. A change is acted on
// once: a pair that does not load is tried again only when a file changes
// again (or on Reload).
func (s *Store) Watch(ctx context.Context, o WatchOptions) {
	if o.Interval <= 0 {
		o.Interval = 2 * time.Second
	}
	Poll(ctx, o.Interval, o.tick, func() {
		if changed, err := s.reloadIfChanged(o.Interval); changed && o.OnReload != nil {
			o.OnReload(err, s.Info())
		}
	})
}

// reloadIfChanged reloads the pair if either file changed since it was
// last read and the change looks complete (Files.Changed, with settle the
// look interval), and reports whether it did.
func (s *Store) reloadIfChanged(settle time.Duration) (changed bool, err error) {
	st, changed := s.files.Changed(settle)
	if !changed {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return true, s.reloadLocked(st)
}
