// Package share keeps hold records in a Redis server (or any server
// speaking its protocol: Valkey, a managed Redis) so that every replica of
// a fleet can honour a record another replica made (routing rule 14).
//
// A Client does two things, neither of which may hurt a request:
//
//   - Put queues a record and returns at once. A background writer sends
//     the queue in pipelined batches (at most every FlushEvery, or sooner
//     when a batch reaches BatchMax records), each key expiring after the
//     hold's idle time. When the queue is full the record is dropped and
//     counted: a later refresh writes it again.
//   - Get asks for one record and waits at most the configured timeout.
//     While the server is known to be unreachable Get answers at once with
//     an error, without touching the network; the writer probes the server
//     with backoff in the background and clears that state when it answers.
//     Only a failure to answer marks it so: what the server answers about
//     one key (a value that is not a record naming a member of the pool,
//     a key of another type) is that key's "no record".
//
// Records are keyed by the key's 64-bit ring hash (prefix + 16 hex digits),
// or with a salt (Options.Salt) by its salted hash (package keyhash), and
// hold the upstream's name, the ring version's hash and the time they
// were written: never the key itself.
package share

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ringlb/ringlb/balancer/keyhash"
)

// Batching and queueing bounds of the writer.
const (
	FlushEvery = 100 * time.Millisecond // longest a queued record waits
	BatchMax   = 500                    // records per pipelined batch
	QueueMax   = 16384                  // queued records; beyond, Put drops
)

// Backoff bounds of the background probe while the server is unreachable.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Options configure a Client. The first fields are the hold.share block
// of the config file, which decodes into it by their yaml tags and sets
// their defaults by their default tags; the config reads Password from
// PasswordFile. The balancer sets the others.
type Options struct {
	// Redis is hold.share.redis, the server's URL:
	// redis://[user@]host:port[/db] or rediss:// for TLS; default "",
	// meaning records stay in this process. A password in the URL is an
	// error in the config file: it belongs in PasswordFile.
	Redis string `yaml:"redis"`
	// PasswordFile is hold.share.password_file, the password file's path
	// as written; default "". A relative path is read from the config
	// file's directory.
	PasswordFile string `yaml:"password_file"`
	// Password is the password file's first line, read when the config
	// is loaded (and on every reload); "" without a file. When not empty
	// it authenticates (it overrides one in Redis).
	Password string
	// Prefix is hold.share.prefix; default "ringlb:hold:". It starts every
	// key the client writes.
	Prefix string `yaml:"prefix" default:"'ringlb:hold:'"`
	// Timeout is hold.share.timeout, the longest Get waits; default 50ms;
	// > 0.
	Timeout time.Duration `yaml:"timeout" default:"50ms"`

	// Salt, when not empty (hash.salt_file), names each record by the
	// salted hash of its key's ring hash instead of the ring hash, so
	// that a reader of the server cannot recover ip or numeric keys from
	// the names. Replicas sharing records must have the same salt.
	Salt string
	// Idle is how long a record lives in the server without a rewrite.
	Idle time.Duration
	// TLS, when not nil, replaces the TLS settings of a rediss:// URL
	// (tests give their own roots); nil keeps the system's roots and the
	// URL's host as the server name.
	TLS *tls.Config
	// Logger receives one line when the server becomes unreachable and
	// one when it answers again; nil discards.
	Logger *slog.Logger
	// Counters, when not nil, are counted into (so that counters outlive
	// a client replaced by a reload); nil: the client's own.
	Counters *Counters
}

// Counters are what a client counts; all only grow.
type Counters struct {
	Errors       atomic.Uint64 // failed or timed-out writes and lookups, and dropped writes
	Dropped      atomic.Uint64 // writes dropped because the queue was full (also in Errors)
	Written      atomic.Uint64 // records written
	Found        atomic.Uint64 // lookups that found a record
	None         atomic.Uint64 // lookups that found none (or no record naming a member: see Get)
	LookupErrors atomic.Uint64 // lookups that failed, timed out, or were not tried (server down)
}

// Check reports whether o's Redis URL can make a client (a redis:// or
// rediss:// URL the library accepts) and its timeout is positive.
func Check(o Options) error {
	u, err := url.Parse(o.Redis)
	if err != nil {
		return fmt.Errorf("not a URL: %v", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return fmt.Errorf("scheme must be redis or rediss, got %q", u.Scheme)
	}
	if _, err := redis.ParseURL(o.Redis); err != nil {
		return err
	}
	if o.Timeout <= 0 {
		return errors.New("timeout must be > 0")
	}
	return nil
}

// Same reports whether o and p would make the same client (a reload that
// keeps them keeps the client and its queue).
func (o Options) Same(p Options) bool {
	return o.Redis == p.Redis && o.Password == p.Password && o.Prefix == p.Prefix &&
		o.Timeout == p.Timeout && o.Idle == p.Idle && o.TLS == p.TLS && o.Salt == p.Salt
}

// Record is a hold record as the server keeps it.
type Record struct {
	Upstream string
	Version  uint64    // the ring version's hash (hold.Version)
	At       time.Time // when the serving replica wrote it
}

// Client is the shared store of one balancer. It is safe for concurrent
// use.
type Client struct {
	rdb     *redis.Client
	prefix  string
	salted  *keyhash.Salted // nil: records are named by ring hash
	timeout time.Duration
	idle    time.Duration
	log     *slog.Logger
	addr    string // host:port, for log lines (never the password)

	// The queue: records q[head:], at most QueueMax, grown as records
	// come (a channel's buffer would be QueueMax records, 0.9 MiB, from
	// the start); wake tells the writer there are some.
	qmu  sync.Mutex
	q    []write
	head int
	wake chan struct{}

	down atomic.Bool
	stop chan struct{}
	done chan struct{}
	once sync.Once

	n       *Counters
	batches atomic.Uint64 // pipelines sent
}

// quiet keeps the library's own log lines (a failed dial, a pool
// timeout) out of ringlb's log: the client logs an outage once itself.
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

var setLogger sync.Once

// New returns a client and starts its writer. It does not contact the
// server: an unreachable one shows in the first write or lookup.
func New(o Options) (*Client, error) {
	if err := Check(o); err != nil {
		return nil, fmt.Errorf("share: %w", err)
	}
	setLogger.Do(func() { redis.SetLogger(quiet{}) })
	ro, _ := redis.ParseURL(o.Redis)
	if o.Password != "" {
		ro.Password = o.Password
	}
	if o.TLS != nil && ro.TLSConfig != nil {
		tc := o.TLS.Clone()
		if tc.ServerName == "" {
			tc.ServerName = ro.TLSConfig.ServerName
		}
		ro.TLSConfig = tc
	}
	// A lookup waits at most its context's deadline: no retries, no
	// pool wait longer than the timeout, and the context decides.
	ro.ContextTimeoutEnabled = true
	ro.MaxRetries = -1
	ro.DialTimeout = max(o.Timeout, time.Second)
	ro.PoolTimeout = o.Timeout
	ro.ReadTimeout = max(o.Timeout, time.Second)
	ro.WriteTimeout = max(o.Timeout, time.Second)
	ro.DisableIdentity = true // no CLIENT SETINFO: older servers refuse it noisily
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Counters == nil {
		o.Counters = new(Counters)
	}
	c := &Client{
		rdb:     redis.NewClient(ro),
		prefix:  o.Prefix,
		salted:  keyhash.New([]byte(o.Salt)),
		timeout: o.Timeout,
		idle:    o.Idle,
		log:     o.Logger,
		addr:    ro.Addr,
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		n:       o.Counters,
	}
	go c.writer()
	return c, nil
}

// Addr returns the server's host:port.
func (c *Client) Addr() string { return c.addr }

// Counters returns what the client counts into.
func (c *Client) Counters() *Counters { return c.n }

// Queued returns how many records wait to be written.
func (c *Client) Queued() int {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	return len(c.q) - c.head
}

// Down reports whether the server is known to be unreachable.
func (c *Client) Down() bool { return c.down.Load() }

// Status is a client's state, for the status page; its zero value: no
// client (share off).
type Status struct {
	On     bool
	Server string // host:port
	Down   bool
	Queued int
	CountersSnapshot
}

// Status returns the client's state.
func (c *Client) Status() Status {
	return Status{On: true, Server: c.addr, Down: c.Down(), Queued: c.Queued(), CountersSnapshot: c.n.Snapshot()}
}

// Close writes what is queued (waiting at most a second for the server),
// stops the writer and closes the connections.
func (c *Client) Close() {
	c.once.Do(func() {
		close(c.stop)
		<-c.done
		_ = c.rdb.Close()
	})
}

// key appends the server key of ring hash h to b: the prefix, then h,
// or with a salt h's salted hash, in 16 hex digits.
func (c *Client) key(b []byte, h uint64) []byte {
	b = append(b, c.prefix...)
	if c.salted != nil {
		h = c.salted.Sum(h)
	}
	return keyhash.AppendHex(b, h)
}

// encode renders a record as "VERSION(hex) UNIXMILLI UPSTREAM".
func encode(b []byte, r Record) []byte {
	b = strconv.AppendUint(b, r.Version, 16)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.At.UnixMilli(), 10)
	b = append(b, ' ')
	return append(b, r.Upstream...)
}

func decode(v string) (Record, bool) {
	ver, rest, ok := strings.Cut(v, " ")
	if !ok {
		return Record{}, false
	}
	at, up, ok := strings.Cut(rest, " ")
	if !ok || up == "" {
		return Record{}, false
	}
	vv, err := strconv.ParseUint(ver, 16, 64)
	if err != nil {
		return Record{}, false
	}
	ms, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return Record{}, false
	}
	return Record{Upstream: up, Version: vv, At: time.UnixMilli(ms)}, true
}

// markDown notes that the server did not answer; the writer probes it
// until it does. The first failure of an outage is logged.
func (c *Client) markDown(err error) {
	if c.down.CompareAndSwap(false, true) {
		c.log.Warn("hold share: store unreachable; requests are routed as without share until it answers",
			"server", c.addr, "err", err)
	}
}

// CountersSnapshot is a copy of Counters.
type CountersSnapshot struct {
	Errors, Dropped, Written, Found, None, LookupErrors uint64
}

// Snapshot returns the counters' current values.
func (n *Counters) Snapshot() CountersSnapshot {
	return CountersSnapshot{
		Errors: n.Errors.Load(), Dropped: n.Dropped.Load(), Written: n.Written.Load(),
		Found: n.Found.Load(), None: n.None.Load(), LookupErrors: n.LookupErrors.Load(),
	}
}
