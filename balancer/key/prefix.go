package key

import (
	"fmt"
	"net/http"
	"sync"
	"unsafe"

	"github.com/ringlb/ringlb/balancer/reqbody"
)

// The prefix source keys an LLM request on the start of its prompt, so
// that requests sharing that start (the turns of one conversation, the
// calls of one agent under one system prompt) hash together and find the
// server whose KV cache holds it. The key is made of, one per line
// ("\n" between them), each in RFC 8785 canonical JSON:
//
//   - the body's model;
//   - its messages (chat completions), each message up to and including
//     the first whose role is "user"; or else its prompt (completions):
//     a string, or the first element of an array; or else its input
//     (responses), whole; the first of those three the body has, in
//     that order, wherever each stands in it;
//
// cut at Bytes bytes. The body is read as far as that takes (to the end
// of the message the cut falls in, and to the model wherever it is),
// never beyond hash.body_limit, and reaches the upstream byte for byte.
// The source is absent (the next one decides) when the body is not
// declared JSON or is compressed, is not a JSON object up to the end of
// the key, holds neither model nor a prompt, has messages that are not
// an array, has what the key needs beyond the limit, or has in the key
// what JCS cannot write (text that is not Unicode, a number beyond a
// double's range, a name twice in one object).

// MinPrefixBytes is the least Bytes a prefix source takes: a shorter
// cut would hold little more than the model's name.
const MinPrefixBytes = 16

// Describe says what a prefix source keys on, for `ringlb validate`;
// "" for the other sources (their keys are what their names say).
func (k Source) Describe(bodyLimit int) string {
	if k.Kind != Prefix {
		return ""
	}
	return fmt.Sprintf("the body's model, then its messages up to and including the first whose role is user "+
		"(or else its prompt, an array's first element, or else its input, whole), each in canonical JSON (RFC 8785), one per line, cut at %d bytes; "+
		"read from the body's first %d bytes (hash.body_limit), absent for a body that is not JSON", k.Bytes, bodyLimit)
}

// prefixScan reads a prefix key: the top-level object's model and its
// prompt field, canonical, through canonScan.
type prefixScan struct {
	canonScan
	bytes int
}

// prefixKey is the prefix source on r, cut at n bytes, read from at most
// limit bytes of the body.
func prefixKey(r *http.Request, n, limit int) (string, bool) {
	p, ok := bodyPrefix(r, limit)
	if !ok {
		return "", false
	}
	s := prefixScan{bytes: n}
	s.p = p
	s.keep = n
	s.maxOut = 2*limit + 2*n + 64
	s.out = p.Scratch()
	mems := memberBufs.Get().(*[]member)
	s.mems = (*mems)[:0]
	v, ok := s.key()
	p.KeepScratch(s.out)
	if cap(s.mems) <= maxPooledMembers {
		*mems = s.mems
		memberBufs.Put(mems)
	}
	if !ok {
		return "", false
	}
	return unsafe.String(unsafe.SliceData(v), len(v)), true
}

// memberBufs lends canonScan's stacks of open members; one that grew
// beyond maxPooledMembers is left to the collector.
var memberBufs = sync.Pool{New: func() any { m := make([]member, 0, 32); return &m }}

const maxPooledMembers = 4096

// bodyPrefix is r's body as the key scan reads it: the reqbody.Prefix
// ServeHTTP gave it, or one of its own. False when the body is not
// declared (uncompressed) JSON, or there is none.
func bodyPrefix(r *http.Request, limit int) (*reqbody.Prefix, bool) {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 || !IsJSONBody(r.Header) {
		return nil, false
	}
	p, ok := r.Body.(*reqbody.Prefix)
	if !ok {
		p = new(reqbody.Prefix)
		p.Init(r.Body, r.ContentLength, limit, nil)
		p.Trailers = reqbody.NewTrailerGate(r)
		r.Body = p
	}
	return p, true
}

// The depths of the body's containers: the top-level object, its
// messages array, a message.
const (
	depthTop     = 1
	depthPrompt  = 2
	depthMessage = 3
)

// key scans the top-level object for model and the prompt field and
// returns the key, in s.out.
func (s *prefixScan) key() ([]byte, bool) {
	c, ok := s.next()
	if !ok || c != '{' {
		return nil, false
	}
	s.pos++
	modelAt, modelEnd := -1, -1   // the model's text in out
	promptAt, promptEnd := -1, -1 // the prompt's lines
	promptRank := noPrompt        // which field they came from: a better one replaces them
	promptDone := false           // no more of the prompt is needed
	s.roleAt = depthMessage
	c, ok = s.next()
	for ok && c != '}' {
		if c != '"' {
			return nil, false
		}
		start, end, esc, sok := s.str()
		if !sok {
			return nil, false
		}
		if c, ok = s.next(); !ok || c != ':' {
			return nil, false
		}
		s.pos++
		if c, ok = s.next(); !ok {
			return nil, false
		}
		switch field, rank := s.topName(start, end, esc); {
		case field == "model" && modelAt < 0:
			modelAt = len(s.out)
			ok = s.value(c, depthTop, modelAt+s.bytes)
			modelEnd = len(s.out)
		case rank < promptRank:
			if field == "messages" && c != '[' {
				return nil, false
			}
			s.out = append(s.out, '\n') // kept apart from what is before it
			promptAt, promptRank = len(s.out), rank
			switch {
			case field == "messages":
				ok, promptDone = s.lines(modelAt, modelEnd, promptAt)
			case field == "prompt" && c == '[':
				ok = s.first(promptAt)
				promptDone = true
			default:
				ok = s.value(c, depthTop, promptAt+s.bytes)
				promptDone = true
			}
			promptEnd = len(s.out)
		default:
			ok = s.skip(c, depthTop)
		}
		if !ok {
			return nil, false
		}
		if modelAt >= 0 && promptDone && promptRank == rankMessages {
			break // complete: the rest of the body is not read
		}
		c, ok = s.following('}')
	}
	if !ok || s.bad {
		return nil, false
	}
	return s.join(modelAt, modelEnd, promptAt, promptEnd)
}

// The prompt fields in the order they are taken: messages, else prompt,
// else input, whatever their order in the body.
const (
	rankMessages = iota
	rankPrompt
	rankInput
	noPrompt
)

// topName is the prompt-related field the top-level member's name
// (p.buf[start:end], escaped when esc) is, and its rank: model
// (noPrompt), messages, prompt, input, or "" (noPrompt).
func (s *prefixScan) topName(start, end int, esc bool) (string, int) {
	for i, f := range [...]string{"messages", "prompt", "input", "model"} {
		if s.nameIs(start, end, esc, f) {
			return f, i
		}
	}
	return "", noPrompt
}

// first writes the first element of the array at pos (a prompt given as
// a list) from out[at:], cut at s.bytes, and passes over the rest; an
// empty array writes nothing.
func (s *prefixScan) first(at int) bool {
	s.pos++
	c, ok := s.next()
	for i := 0; ok && c != ']'; i++ {
		if i == 0 {
			ok = s.value(c, depthPrompt, at+s.bytes)
		} else {
			ok = s.skip(c, depthPrompt)
		}
		if ok {
			c, ok = s.following(']')
		}
	}
	if !ok {
		return false
	}
	s.pos++
	return true
}

// lines writes the array at pos (messages, or input) one element per
// line from out[at:], up to and including the first whose role is user,
// or to the cut. With the model written (out[modelAt:modelEnd]) it
// stops there, the rest of the array unread (done); without, the rest
// is scanned for the model that may follow.
func (s *prefixScan) lines(modelAt, modelEnd, at int) (ok, done bool) {
	s.pos++
	c, ok := s.next()
	writing := true
	for i := 0; ok && c != ']'; i++ {
		if !writing {
			ok = s.skip(c, depthPrompt)
		} else {
			if i > 0 {
				s.out = append(s.out, '\n')
			}
			s.user = false
			ok = s.value(c, depthPrompt, len(s.out)+s.bytes)
			// Enough: the first user message is in, or the cut is
			// reached whatever the model adds.
			writing = !s.user && len(s.out)-at < s.bytes
			if !writing && modelAt >= 0 {
				return ok, true
			}
		}
		if ok {
			c, ok = s.following(']')
		}
	}
	if !ok {
		return false, false
	}
	s.pos++
	return true, true
}

// join puts the key together in out: the model, "\n", the prompt's
// lines (either may be absent, not both), cut at s.bytes.
func (s *prefixScan) join(modelAt, modelEnd, promptAt, promptEnd int) ([]byte, bool) {
	var k []byte
	if promptEnd == promptAt {
		promptAt = -1 // no line: as if there were no prompt
	}
	switch {
	case modelAt < 0 && promptAt < 0:
		return nil, false
	case promptAt < 0:
		k = s.out[modelAt:modelEnd]
	case modelAt < 0:
		k = s.out[promptAt:promptEnd]
	case modelEnd+1 == promptAt:
		k = s.out[modelAt:promptEnd] // the "\n" is between them already
	default:
		// The prompt came first: the model, then a copy of it.
		s.out = s.out[:modelEnd]
		s.out = append(s.out, '\n')
		s.out = append(s.out, s.out[promptAt:promptEnd]...)
		k = s.out[modelAt:]
	}
	if len(k) > s.bytes {
		k = k[:s.bytes]
	}
	return k, len(k) > 0
}
