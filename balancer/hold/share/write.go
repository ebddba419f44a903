package share

import (
	"context"
	"time"
)

// Writes: Put's queue, and the writer that sends it in pipelined batches
// and probes the server while it is down.

// write is a queued record, for the key with ring hash hash.
type write struct {
	hash uint64
	rec  Record
}

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

// signal wakes the writer; it never blocks.
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

// writer sends the queue in batches and, while the server is down, probes
// it with backoff (keeping at most one batch aside; the queue fills and
// Put drops beyond it).
func (c *Client) writer() {
	defer close(c.done)
	b := batcher{c: c, batch: make([]write, 0, BatchMax), backoff: minBackoff}
	tick := time.NewTicker(FlushEvery)
	defer tick.Stop()
	for {
		select {
		case <-c.stop:
			b.final()
			return
		case <-tick.C:
			if c.down.Load() && !b.probe() {
				continue
			}
			b.flushNow()
		case <-c.wake:
			b.take()
		}
	}
}

// batcher is the writer's state: the batch it fills, and the backoff of
// its probe while the server is down.
type batcher struct {
	c       *Client
	batch   []write
	buf     []byte // a record's value, encoded
	backoff time.Duration
	retryAt time.Time // the next probe's time
}

// flush sends the batch in one pipeline, counting its records written or
// failed (then the server is down), and empties it.
func (b *batcher) flush(ctx context.Context) {
	if len(b.batch) == 0 {
		return
	}
	c := b.c
	pipe := c.rdb.Pipeline()
	for _, w := range b.batch {
		b.buf = encode(b.buf[:0], w.rec)
		k := string(c.key(nil, w.hash))
		pipe.Set(ctx, k, string(b.buf), c.idle)
	}
	c.batches.Add(1)
	if _, err := pipe.Exec(ctx); err != nil {
		c.n.Errors.Add(uint64(len(b.batch)))
		c.markDown(err)
	} else {
		c.n.Written.Add(uint64(len(b.batch)))
	}
	b.batch = b.batch[:0]
}

// flushNow flushes within the timeout (at least a second).
func (b *batcher) flushNow() {
	ctx, cancel := context.WithTimeout(context.Background(), max(b.c.timeout, time.Second))
	b.flush(ctx)
	cancel()
}

// final, as the client closes, fills the batch from the queue and writes
// it within a second, unless the server is down.
func (b *batcher) final() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if b.c.down.Load() {
		return
	}
	for len(b.batch) < cap(b.batch) {
		w, ok, _ := b.c.pop()
		if !ok {
			break
		}
		b.batch = append(b.batch, w)
	}
	b.flush(ctx)
}

// probe pings the server that is down, unless its backoff is not over,
// and reports whether it answered: then it is up again.
func (b *batcher) probe() bool {
	c := b.c
	if time.Now().Before(b.retryAt) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), max(c.timeout, time.Second))
	err := c.rdb.Ping(ctx).Err()
	cancel()
	if err != nil {
		b.retryAt = time.Now().Add(b.backoff)
		b.backoff = min(2*b.backoff, maxBackoff)
		return false
	}
	b.backoff, b.retryAt = minBackoff, time.Time{}
	c.down.Store(false)
	c.log.Info("hold share: store reachable again", "server", c.addr)
	return true
}

// take moves one queued record into the batch, one per turn as a channel
// would give them, so that stop and the tick are seen between records. A
// full batch is flushed while the server is up; while it is down, a
// record beyond a full batch is dropped.
func (b *batcher) take() {
	c := b.c
	w, ok, more := c.pop()
	if more {
		c.signal()
	}
	if !ok {
		return
	}
	if c.down.Load() && len(b.batch) == cap(b.batch) {
		c.n.Dropped.Add(1)
		c.n.Errors.Add(1)
		return
	}
	b.batch = append(b.batch, w)
	if len(b.batch) == cap(b.batch) && !c.down.Load() {
		b.flushNow()
	}
}
