// Package accesslog writes one line per request in one of three formats:
// text (through log/slog, as ringlb's other log lines), json (one object
// per line) and combined (nginx's combined format followed by ringlb's
// fields as key=value), to standard output or to a file that Reopen opens
// again (logrotate's postrotate sends SIGUSR1, which calls it).
package accesslog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"
)

// Formats.
const (
	Text     = "text"
	JSON     = "json"
	Combined = "combined"
)

// Skip is an upstream passed over, and why.
type Skip struct{ Name, Reason string }

// Entry is one request's line. Empty strings and zero numbers are still
// written (as "" or 0, "-" in combined's own fields), so every line of a
// format has the same fields.
type Entry struct {
	Time      time.Time // when the request arrived
	Remote    string    // the client's address (host:port)
	Method    string
	Host      string
	URI       string // as received
	Proto     string // HTTP/1.1, HTTP/2.0
	Status    int
	BytesIn   int64 // request body bytes read
	BytesOut  int64 // response body bytes written
	Duration  time.Duration
	TTFB      time.Duration // from the request's arrival to the response head; 0 without one
	Referer   string
	UserAgent string
	Pool      string
	Upstream  string // the upstream of the last attempt; "" for none
	KeySource string // cookie:session, header:X-User-ID, uri, ..., random, generated
	KeyHash   string // the key's ring position in hex; never the key
	Decision  string // owner, overflow, held, cookie-held, retry, fail-closed, busy, no-upstream, rejected, body-timeout, body-memory
	Skipped   []Skip
	Attempts  int
	Cause     string // refused, reset, timeout, tls, bad response, local, client; "" when none failed
	// HandoffFrom is the upstream the handoff header named as the key's
	// previous one (routing rule 17); "" when the request carried none.
	HandoffFrom string
	RequestID   string
	TraceID     string // from traceparent; "" without one
}

// Logger writes Entries. It is safe for concurrent use.
type Logger struct {
	format string
	path   string
	text   *slog.Logger // for Text

	mu  sync.Mutex
	w   io.Writer
	f   *os.File // the file written to, when path is set
	buf []byte
	sec secondCache // the current second's time text, for JSON or Combined
}

// secondCache holds the text of a time up to its seconds, for the last
// second a line was written in: formatting a layout costs more than the
// rest of a JSON line, and lines come many to a second. The Logger's mutex
// guards it.
type secondCache struct {
	sec    int64          // Unix seconds of text; valid when len(text) > 0
	zone   *time.Location // the time's location when text was made
	layout string
	text   []byte
}

// appendSecond appends t formatted with layout (which must print nothing
// finer than seconds) from the cache, remaking it when t is in another
// second or location, or the layout is another.
func (c *secondCache) appendSecond(b []byte, t time.Time, layout string) []byte {
	if s := t.Unix(); s != c.sec || t.Location() != c.zone || layout != c.layout || len(c.text) == 0 {
		c.sec, c.zone, c.layout = s, t.Location(), layout
		c.text = t.AppendFormat(c.text[:0], layout)
	}
	return append(b, c.text...)
}

// New returns a Logger in format (Text, JSON or Combined) writing to the
// file at path (created or appended to), or to stdout when path is "".
// Text lines go through a slog text handler on that writer, or, without
// a path and with textLog not nil, through textLog (the process's log).
func New(format, path string, stdout io.Writer, textLog *slog.Logger) (*Logger, error) {
	l := &Logger{format: format, path: path, w: stdout}
	switch format {
	case Text, JSON, Combined:
	default:
		return nil, fmt.Errorf("accesslog: format must be text, json or combined, got %q", format)
	}
	if path != "" {
		f, err := open(path)
		if err != nil {
			return nil, err
		}
		l.f, l.w = f, f
	}
	l.text = slog.New(slog.NewTextHandler(lockedWriter{l}, nil))
	if path == "" && textLog != nil {
		l.text = textLog
	}
	return l, nil
}

// open opens path for appending, creating it if need be.
func open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("accesslog: %w", err)
	}
	return f, nil
}

// Format returns the logger's format; Path its file ("" for stdout).
func (l *Logger) Format() string { return l.format }
func (l *Logger) Path() string   { return l.path }

// Reopen opens the file again (after logrotate moved it away) and closes
// the old one; on failure the old file stays in use. Without a file it
// does nothing.
func (l *Logger) Reopen() error {
	if l.path == "" {
		return nil
	}
	f, err := open(l.path)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old := l.f
	l.f, l.w = f, f
	l.mu.Unlock()
	return old.Close()
}

// Close closes the file, if any.
func (l *Logger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f, l.w = nil, io.Discard
	return err
}

// lockedWriter lets the slog handler write under the logger's lock, to
// whatever file is current.
type lockedWriter struct{ l *Logger }

// Write writes p to the logger's current writer under its lock.
func (lw lockedWriter) Write(p []byte) (int, error) {
	lw.l.mu.Lock()
	defer lw.l.mu.Unlock()
	return lw.l.w.Write(p)
}

// Log writes e's line.
func (l *Logger) Log(e *Entry) {
	if l.format == Text {
		l.text.LogAttrs(context.Background(), slog.LevelInfo, "request", attrs(e)...)
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.buf[:0]
	if l.format == JSON {
		b = appendJSON(b, e, &l.sec)
	} else {
		b = appendCombined(b, e, &l.sec)
	}
	b = append(b, '\n')
	_, _ = l.w.Write(b)
	if cap(b) <= 64<<10 {
		l.buf = b
	}
}

// skippedText renders the skipped upstreams as name:reason,name:reason.
func skippedText(sk []Skip) string {
	if len(sk) == 0 {
		return ""
	}
	var b []byte
	for i, s := range sk {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, s.Name...)
		b = append(b, ':')
		b = append(b, s.Reason...)
	}
	return string(b)
}

// attrs is e as the text format's slog attributes: the json format's
// fields, under the same names and in the same order.
func attrs(e *Entry) []slog.Attr {
	return []slog.Attr{
		slog.String("remote", e.Remote), slog.String("method", e.Method), slog.String("host", e.Host),
		slog.String("uri", e.URI), slog.String("protocol", e.Proto), slog.Int("status", e.Status),
		slog.Int64("bytes_received", e.BytesIn), slog.Int64("bytes_sent", e.BytesOut),
		slog.Duration("duration", e.Duration), slog.Duration("upstream_ttfb", e.TTFB),
		slog.String("referer", e.Referer), slog.String("user_agent", e.UserAgent),
		slog.String("pool", e.Pool), slog.String("upstream", e.Upstream),
		slog.String("key_source", e.KeySource), slog.String("key_hash", e.KeyHash),
		slog.String("decision", e.Decision), slog.String("skipped", skippedText(e.Skipped)),
		slog.Int("attempts", e.Attempts), slog.String("cause", e.Cause), slog.String("handoff_from", e.HandoffFrom),
		slog.String("request_id", e.RequestID), slog.String("trace_id", e.TraceID),
	}
}

// appendSeconds appends d in seconds with six decimals, rounded to the
// nearest microsecond, as strconv.AppendFloat(d.Seconds(), 'f', 6)
// writes it (but for a tie, exactly half a microsecond, which this rounds
// up) without the float conversion's cost.
func appendSeconds(b []byte, d time.Duration) []byte {
	if d < 0 {
		return strconv.AppendFloat(b, d.Seconds(), 'f', 6, 64)
	}
	us := (d + 500) / time.Microsecond
	b = strconv.AppendInt(b, int64(us/1e6), 10)
	f := us % 1e6
	return append(b, '.', byte('0'+f/100000), byte('0'+f/10000%10), byte('0'+f/1000%10),
		byte('0'+f/100%10), byte('0'+f/10%10), byte('0'+f%10))
}

// hexDigits are the digits of the \u00XX and \xHH escapes.
const hexDigits = "0123456789abcdef"

// TraceID returns the trace id of a W3C traceparent header value
// ("00-<32 hex>-<16 hex>-<2 hex>"), or "" when it is not one.
func TraceID(traceparent string) string {
	if len(traceparent) < 55 || traceparent[2] != '-' || traceparent[35] != '-' {
		return ""
	}
	id := traceparent[3:35]
	zero := true
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return ""
		}
		if c != '0' {
			zero = false
		}
	}
	if zero {
		return ""
	}
	return id
}
