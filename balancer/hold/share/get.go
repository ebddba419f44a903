package share

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// Lookups: Get, bounded by the timeout, and the members a record read
// from the server must name.

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
