package reqbody

import "sync/atomic"

// Memory is the account of limits.body_memory: the bytes of the
// buffers request bodies are read into to find their keys, held now by
// every Balancer that shares it (those of one process: a Router's pools
// share their Router's, see procMetrics), and the limit (0: none). The
// limit is the process's, which every install sets alike.
type Memory struct{ held, limit atomic.Int64 }

// Take counts n more bytes unless that would take the total beyond the
// limit; it reports whether they may be held.
func (m *Memory) Take(n int64) bool {
	lim := m.limit.Load()
	if v := m.held.Add(n); n > 0 && lim > 0 && v > lim {
		m.held.Add(-n)
		return false
	}
	return true
}

// Put gives back n bytes that Take counted.
func (m *Memory) Put(n int64) { m.held.Add(-n) }

// SetLimit sets the limit (0: none).
func (m *Memory) SetLimit(n int64) { m.limit.Store(n) }

// Held is the bytes held now.
func (m *Memory) Held() int64 { return m.held.Load() }
