// Package chat builds the OpenAI-style chat completion bodies that the
// key benchmarks and tests send.
package chat

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
)

// Body is an OpenAI-style chat completion body of about size bytes;
// first puts prompt_cache_key before the messages, absent leaves it out.
func Body(size int, first, absent bool) []byte {
	key := `"prompt_cache_key":"conv-7f3a9c","user":"u-42",`
	if absent {
		key = `"user":"u-42",`
	}
	var sb strings.Builder
	sb.WriteString(`{"model":"llama-3.1-70b-instruct",`)
	if first {
		sb.WriteString(key)
	}
	sb.WriteString(`"messages":[`)
	for i := 0; sb.Len() < size-200; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"role":"user","content":"Turn %d: summarise the \"quarterly\" report, section %d.\nKeep it short; list the risks.%s"}`, i, i, strings.Repeat(" lorem ipsum dolor sit amet", 8))
	}
	sb.WriteString(`],"temperature":0.7,"max_tokens":512,"stream":true`)
	if !first && !absent {
		sb.WriteString("," + strings.TrimSuffix(key, ","))
	}
	sb.WriteString("}")
	return []byte(sb.String())
}

// Rewind is a request body that a benchmark rewinds between runs
// (Reset).
type Rewind struct{ bytes.Reader }

// Close does nothing: the body is read again after Reset.
func (*Rewind) Close() error { return nil }

// Request is a request with a JSON body as a server hands it over.
func Request(body string) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, "http://front.example/v1/chat/completions", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return r
}

// LongSystem is a chat completion body of about size bytes whose key
// the prefix source must read to the end: a long system prompt (with
// escapes and non-ASCII text), the user's question, and the model last.
func LongSystem(size int) []byte {
	var sb strings.Builder
	sb.WriteString(`{"messages":[{"role":"system","content":"`)
	for sb.Len() < size-300 {
		sb.WriteString(`You are a careful assistant. Answer \"briefly\" and cite the manual, § 4.2.\n`)
	}
	sb.WriteString(`"},{"role":"user","content":"What changed in the quarterly report?"}],"temperature":0.7,"max_tokens":512,"stream":true,"model":"llama-3.1-70b-instruct"}`)
	return []byte(sb.String())
}
