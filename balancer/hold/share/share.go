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
	"bytes"
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

	"github.com/ringlb/ringlb/balancer/hold"
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

// Options configure a Client.
type Options struct {
	// URL is redis://[user@]host:port[/db] or rediss:// for TLS.
	URL string
	// Password, when not empty, authenticates (it overrides one in URL).
	Password string
	// Prefix starts every key the client writes.
	Prefix string
	// Salt, when not empty (hash.salt_file), names each record by the
	// salted hash of its key's ring hash instead of the ring hash, so
	// that a reader of the server cannot recover ip or numeric keys from
	// the names. Replicas sharing records must have the same salt.
	Salt []byte
	// Timeout is the longest Get waits.
	Timeout time.Duration
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

// Check reports whether o's URL can make a client (a redis:// or
// rediss:// URL the library accepts) and its timeout is positive.
func Check(o Options) error {
	u, err := url.Parse(o.URL)
	if err != nil {
		return fmt.Errorf("not a URL: %v", err)
	}
	if u.Scheme != "redis" && u.Scheme != "rediss" {
		return fmt.Errorf("scheme must be redis or rediss, got %q", u.Scheme)
	}
	if _, err := redis.ParseURL(o.URL); err != nil {
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
	return o.URL == p.URL && o.Password == p.Password && o.Prefix == p.Prefix &&
		o.Timeout == p.Timeout && o.Idle == p.Idle && o.TLS == p.TLS && bytes.Equal(o.Salt, p.Salt)
}

// Record is a hold record as the server keeps it.
type Record struct {
	Upstream string
	Version  hold.Version
	At       time.Time // when the serving replica wrote it
}

type write struct {
	hash uint64
	rec  Record
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
	ro, _ := redis.ParseURL(o.URL)
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
		salted:  keyhash.New(o.Salt),
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

// Put queues a record for the key with ring hash h; it never blocks.
func (c *Client) Put(h uint64, r Record) {
	c.qmu.Lock()
	if len(c.q)-c.head >= QueueMax {
		c.qmu.Unlock()
		c.n.Dropped.Add(1)
		c.n.Errors.Add(1)
		return
	}
	if c.head > 0 && len(c.q) == cap(c.q) && c.head >= len(c.q)/2 {
		n := copy(c.q, c.q[c.head:]) // reuse the taken front rather than grow
		clear(c.q[n:])
		c.q, c.head = c.q[:n], 0
	}
	first := len(c.q) == c.head
	c.q = append(c.q, write{h, r})
	c.qmu.Unlock()
	if first { // otherwise the writer is woken already, or told by pop that more wait
		c.signal()
	}
}

func (c *Client) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// queueKeep is the capacity an emptied queue keeps; a larger one (after
// a burst) is let go.
const queueKeep = 1024

// pop takes the oldest queued record; more reports whether others wait.
func (c *Client) pop() (w write, ok, more bool) {
	c.qmu.Lock()
	defer c.qmu.Unlock()
	if c.head == len(c.q) {
		return write{}, false, false
	}
	w = c.q[c.head]
	c.q[c.head] = write{}
	c.head++
	if c.head == len(c.q) {
		c.head = 0
		if cap(c.q) > queueKeep {
			c.q = nil
		} else {
			c.q = c.q[:0]
		}
	}
	return w, true, c.head < len(c.q)
}

// Members are the upstream names a record may name: the pool's current
// members. A record read from the server that names another upstream is
// no record, so what others write there cannot make the process keep
// names it does not serve (nor records on them).
type Members struct {
	names   map[string]string // a member's name → the member's own string
	longest int               // bytes of the longest name
}

// NewMembers returns the Members of these names.
func NewMembers(names []string) *Members {
	m := &Members{names: make(map[string]string, len(names))}
	for _, n := range names {
		m.names[n] = n
		m.longest = max(m.longest, len(n))
	}
	return m
}

// maxValue is the longest value a record naming one of m can have:
// "VERSION(16 hex) UNIXMILLI(at most 20 characters) UPSTREAM".
func (m *Members) maxValue() int { return 16 + 1 + 20 + 1 + m.longest }

// Get looks the record of ring hash h up, waiting at most the timeout
// (ctx may end it sooner). ok is false when there is none; err is set when
// the server could not answer (then ok is false too).
//
// A value that is not a record naming one of m is none: one longer than
// any such record (it is not read past that length), one that does not
// decode, and a key holding another type than a string (WRONGTYPE: the
// server answered, about that key only; the key's next write replaces it).
func (c *Client) Get(ctx context.Context, h uint64, m *Members) (r Record, ok bool, err error) {
	if c.down.Load() {
		c.n.LookupErrors.Add(1)
		c.n.Errors.Add(1)
		return Record{}, false, errDown
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var kb [64]byte
	limit := m.maxValue()
	// GETRANGE reads at most limit+1 bytes (a missing key is ""), so a
	// value longer than any record is known as such without reading it.
	v, err := c.rdb.GetRange(ctx, string(c.key(kb[:0], h)), 0, int64(limit)).Result()
	switch {
	case err == nil:
	case errors.Is(err, redis.Nil), redis.HasErrorPrefix(err, "WRONGTYPE"):
		c.n.None.Add(1)
		return Record{}, false, nil
	default:
		c.n.LookupErrors.Add(1)
		c.n.Errors.Add(1)
		if !errors.Is(err, context.Canceled) {
			c.markDown(err)
		}
		return Record{}, false, err
	}
	if len(v) > limit {
		c.n.None.Add(1)
		return Record{}, false, nil
	}
	r, ok = decode(v)
	if ok {
		r.Upstream, ok = m.names[r.Upstream] // the member's string: v is not kept
	}
	if !ok {
		c.n.None.Add(1) // not a record of ours: as if there were none
		return Record{}, false, nil
	}
	c.n.Found.Add(1)
	return r, true, nil
}

var errDown = errors.New("share: store unreachable (retrying in the background)")

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
	b = strconv.AppendUint(b, uint64(r.Version), 16)
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
	return Record{Upstream: up, Version: hold.Version(vv), At: time.UnixMilli(ms)}, true
}

// markDown notes that the server did not answer; the writer probes it
// until it does. The first failure of an outage is logged.
func (c *Client) markDown(err error) {
	if c.down.CompareAndSwap(false, true) {
		c.log.Warn("hold share: store unreachable; requests are routed as without share until it answers",
			"server", c.addr, "err", err)
	}
}

// writer sends the queue in batches and, while the server is down, probes
// it with backoff (keeping at most one batch aside; the queue fills and
// Put drops beyond it).
func (c *Client) writer() {
	defer close(c.done)
	batch := make([]write, 0, BatchMax)
	tick := time.NewTicker(FlushEvery)
	defer tick.Stop()
	backoff := minBackoff
	var retryAt time.Time
	var buf []byte
	flush := func(ctx context.Context) {
		if len(batch) == 0 {
			return
		}
		pipe := c.rdb.Pipeline()
		for _, w := range batch {
			buf = encode(buf[:0], w.rec)
			k := string(c.key(nil, w.hash))
			pipe.Set(ctx, k, string(buf), c.idle)
		}
		c.batches.Add(1)
		if _, err := pipe.Exec(ctx); err != nil {
			c.n.Errors.Add(uint64(len(batch)))
			c.markDown(err)
		} else {
			c.n.Written.Add(uint64(len(batch)))
		}
		batch = batch[:0]
	}
	for {
		select {
		case <-c.stop:
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			if !c.down.Load() {
				for len(batch) < cap(batch) {
					w, ok, _ := c.pop()
					if !ok {
						break
					}
					batch = append(batch, w)
				}
				flush(ctx)
			}
			cancel()
			return
		case <-tick.C:
			if c.down.Load() {
				if time.Now().Before(retryAt) {
					continue
				}
				ctx, cancel := context.WithTimeout(context.Background(), max(c.timeout, time.Second))
				err := c.rdb.Ping(ctx).Err()
				cancel()
				if err != nil {
					retryAt = time.Now().Add(backoff)
					backoff = min(2*backoff, maxBackoff)
					continue
				}
				backoff, retryAt = minBackoff, time.Time{}
				c.down.Store(false)
				c.log.Info("hold share: store reachable again", "server", c.addr)
			}
			ctx, cancel := context.WithTimeout(context.Background(), max(c.timeout, time.Second))
			flush(ctx)
			cancel()
		case <-c.wake:
			// One record per turn, as a channel would give them, so that
			// stop and the tick are seen between records.
			w, ok, more := c.pop()
			if more {
				c.signal()
			}
			if !ok {
				continue
			}
			if c.down.Load() && len(batch) == cap(batch) {
				c.n.Dropped.Add(1)
				c.n.Errors.Add(1)
				continue
			}
			batch = append(batch, w)
			if len(batch) == cap(batch) && !c.down.Load() {
				ctx, cancel := context.WithTimeout(context.Background(), max(c.timeout, time.Second))
				flush(ctx)
				cancel()
			}
		}
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
