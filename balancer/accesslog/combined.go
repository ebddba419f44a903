package accesslog

// This file writes the combined format.

import "strconv"

// appendCombined appends nginx's combined format,
//
//	$remote_addr - - [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"
//
// then ringlb's fields as key=value (values with spaces or quotes quoted).
func appendCombined(b []byte, e *Entry, sc *secondCache) []byte {
	host := e.Remote
	if i := lastColon(host); i >= 0 {
		host = host[:i]
	}
	if len(host) > 1 && host[0] == '[' && host[len(host)-1] == ']' {
		host = host[1 : len(host)-1]
	}
	b = append(b, dash(host)...)
	b = append(b, " - - ["...)
	b = sc.appendSecond(b, e.Time, "02/Jan/2006:15:04:05 -0700")
	b = append(b, `] "`...)
	b = appendRequestPart(b, e.Method)
	b = append(b, ' ')
	b = appendRequestPart(b, e.URI)
	b = append(b, ' ')
	b = appendRequestPart(b, e.Proto)
	b = append(b, `" `...)
	b = strconv.AppendInt(b, int64(e.Status), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, e.BytesOut, 10)
	b = append(b, ` "`...)
	b = appendEscaped(b, dash(e.Referer))
	b = append(b, `" "`...)
	b = appendEscaped(b, dash(e.UserAgent))
	b = append(b, '"')
	kv := func(k, v string) {
		b = append(b, ' ')
		b = append(b, k...)
		b = append(b, '=')
		if v == "" {
			b = append(b, '-')
			return
		}
		if needsQuote(v) {
			b = append(b, '"')
			b = appendEscaped(b, v)
			b = append(b, '"')
			return
		}
		b = append(b, v...)
	}
	kv("host", e.Host)
	kv("bytes_received", strconv.FormatInt(e.BytesIn, 10))
	var num [32]byte
	kv("duration", string(appendSeconds(num[:0], e.Duration)))
	kv("upstream_ttfb", string(appendSeconds(num[:0], e.TTFB)))
	kv("pool", e.Pool)
	kv("upstream", e.Upstream)
	kv("key_source", e.KeySource)
	kv("key_hash", e.KeyHash)
	kv("decision", e.Decision)
	kv("skipped", skippedText(e.Skipped))
	kv("attempts", strconv.Itoa(e.Attempts))
	kv("cause", e.Cause)
	kv("handoff_from", e.HandoffFrom)
	kv("request_id", e.RequestID)
	kv("trace_id", e.TraceID)
	return b
}

// lastColon is the index of the port's colon in host:port, or -1 when
// there is none (a bare address, or one inside [brackets]).
func lastColon(s string) int {
	for i := len(s) - 1; i >= 0; i-- {
		switch s[i] {
		case ':':
			return i
		case ']':
			return -1
		}
	}
	return -1
}

// dash is s, or "-" when s is empty, as nginx writes a missing value.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// needsQuote reports whether a key=value value must be quoted: it holds a
// space, a control byte, a quote, a backslash or a byte outside ASCII.
func needsQuote(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c == '"' || c == '\\' || c >= 0x7f {
			return true
		}
	}
	return false
}

// appendEscaped appends s with quotes, backslashes and bytes outside
// printable ASCII as \xHH, as nginx escapes variables in its logs.
func appendEscaped(b []byte, s string) []byte { return appendEscapedSet(b, s, false) }

// appendRequestPart appends the method, target or protocol of the
// "$request" field, escaped as appendEscaped does and its spaces too, as
// \x20: HTTP/1.1 cannot put a space in them, but an HTTP/2 client can
// (":path: /a HTTP/1.1\" 200 ..." is a valid path to net/http), and a
// log parser that splits the field on spaces would read a forged
// protocol or status.
func appendRequestPart(b []byte, s string) []byte { return appendEscapedSet(b, s, true) }

// appendEscapedSet escapes as appendEscaped does, and spaces too when space.
func appendEscapedSet(b []byte, s string, space bool) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '"' || c == '\\' || c < 0x20 || c >= 0x7f || (space && c == ' ') {
			b = append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
			continue
		}
		b = append(b, c)
	}
	return b
}
