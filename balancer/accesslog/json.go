package accesslog

// This file writes the json format.

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// appendJSON appends e as one JSON object. Durations are seconds (a
// float, as Envoy's and nginx's $request_time); time is RFC 3339 with
// milliseconds.
func appendJSON(b []byte, e *Entry, sc *secondCache) []byte {
	b = append(b, `{"time":"`...)
	t := e.Time.UTC()
	b = sc.appendSecond(b, t, "2006-01-02T15:04:05")
	ms := t.Nanosecond() / 1e6
	b = append(b, '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z', '"')
	str := func(name, v string) {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = appendJSONString(b, v)
	}
	num := func(name string, v int64) {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = strconv.AppendInt(b, v, 10)
	}
	secs := func(name string, d time.Duration) {
		b = append(b, ',', '"')
		b = append(b, name...)
		b = append(b, '"', ':')
		b = appendSeconds(b, d)
	}
	str("remote", e.Remote)
	str("method", e.Method)
	str("host", e.Host)
	str("uri", e.URI)
	str("protocol", e.Proto)
	num("status", int64(e.Status))
	num("bytes_received", e.BytesIn)
	num("bytes_sent", e.BytesOut)
	secs("duration", e.Duration)
	secs("upstream_ttfb", e.TTFB)
	str("referer", e.Referer)
	str("user_agent", e.UserAgent)
	str("pool", e.Pool)
	str("upstream", e.Upstream)
	str("key_source", e.KeySource)
	str("key_hash", e.KeyHash)
	str("decision", e.Decision)
	b = append(b, `,"skipped":[`...)
	for i, s := range e.Skipped {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"name":`...)
		b = appendJSONString(b, s.Name)
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, s.Reason)
		b = append(b, '}')
	}
	b = append(b, ']')
	num("attempts", int64(e.Attempts))
	str("cause", e.Cause)
	str("handoff_from", e.HandoffFrom)
	str("request_id", e.RequestID)
	str("trace_id", e.TraceID)
	return append(b, '}')
}

// jsonPlain marks the bytes a JSON string holds as they are: printable
// ASCII but for the quote and the backslash.
var jsonPlain = func() (t [256]bool) {
	for c := 0x20; c < 0x7f; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// appendJSONString appends s as a JSON string; invalid UTF-8 becomes
// U+FFFD, as encoding/json does. Runs of plain bytes are copied whole.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	for {
		n := plainRun(s)
		b = append(b, s[:n]...)
		s = s[n:]
		if s == "" {
			return append(b, '"')
		}
		if c := s[0]; c < utf8.RuneSelf {
			if c == '"' || c == '\\' {
				b = append(b, '\\', c)
			} else {
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			s = s[1:]
			continue
		}
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		default:
			b = append(b, s[:n]...)
		}
		s = s[n:]
	}
}

// plainRun is the length of the run of plain bytes (jsonPlain) s starts
// with.
func plainRun(s string) int {
	for i := 0; i < len(s); i++ {
		if !jsonPlain[s[i]] {
			return i
		}
	}
	return len(s)
}
