package main

import (
	"container/list"
	"encoding/json"
	"fmt"
	"hash/maphash"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ServerConfig is a fake model server's hardware, in the units the
// simulation speaks: bytes of prompt, blocks of KV cache, tokens out.
type ServerConfig struct {
	// Slots is how many requests it computes at once; the others queue.
	Slots int
	// CacheBlocks is the KV cache's size in blocks of BlockBytes prompt
	// bytes, kept least recently used first out.
	CacheBlocks int
	BlockBytes  int
	// TTFT is Base + PerByte for every prompt byte not in the cache (the
	// prefill), after the wait for a slot.
	Base, PerByte time.Duration
	// PerToken is the decode time of each output token.
	PerToken time.Duration
}

// Server is an OpenAI-compatible model server (POST /v1/chat/completions
// and /v1/completions, streamed as server-sent events or whole; GET
// /health and /v1/models) that computes nothing: it keeps a prefix KV
// cache of chained block hashes, as vLLM's automatic prefix caching
// does, and sleeps for what the uncached part of a prompt and the
// tokens out would take.
type Server struct {
	Name  string
	cfg   ServerConfig
	slots chan struct{}

	mu    sync.Mutex
	lru   *list.List // of uint64 block hashes, most recent first
	index map[uint64]*list.Element

	Requests, PromptBytes, CachedBytes atomic.Int64
	busy                               atomic.Int64 // requests holding a slot
}

// NewServer returns an idle server with an empty cache.
func NewServer(name string, cfg ServerConfig) *Server {
	return &Server{Name: name, cfg: cfg, slots: make(chan struct{}, cfg.Slots), lru: list.New(), index: map[uint64]*list.Element{}}
}

var blockSeed = maphash.MakeSeed()

// blocks is the chained hash of each full block of text: block i's hash
// covers blocks 0..i, so a block is found only after the same prefix.
func (s *Server) blocks(text string) []uint64 {
	n := len(text) / s.cfg.BlockBytes
	hs := make([]uint64, n)
	var h uint64
	for i := range n {
		var m maphash.Hash
		m.SetSeed(blockSeed)
		var b [8]byte
		for j := range 8 {
			b[j] = byte(h >> (8 * j))
		}
		m.Write(b[:])
		m.WriteString(text[i*s.cfg.BlockBytes : (i+1)*s.cfg.BlockBytes])
		h = m.Sum64()
		hs[i] = h
	}
	return hs
}

// cached returns how many leading blocks of hs the cache holds, marking
// them used.
func (s *Server) cached(hs []uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, h := range hs {
		e, ok := s.index[h]
		if !ok {
			return i
		}
		s.lru.MoveToFront(e)
	}
	return len(hs)
}

// store puts hs in the cache, evicting the least recently used blocks.
func (s *Server) store(hs []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range hs {
		if e, ok := s.index[h]; ok {
			s.lru.MoveToFront(e)
			continue
		}
		s.index[h] = s.lru.PushFront(h)
		for s.lru.Len() > s.cfg.CacheBlocks {
			old := s.lru.Remove(s.lru.Back()).(uint64)
			delete(s.index, old)
		}
	}
}

// chatRequest is what the server reads of a request body.
type chatRequest struct {
	Model     string        `json:"model"`
	Messages  []chatMessage `json:"messages"`
	Prompt    any           `json:"prompt"`
	MaxTokens int           `json:"max_tokens"`
	Stream    bool          `json:"stream"`
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// render is the prompt text of a chat, as a chat template writes it:
// each message on its own, in order. The next turn's prompt starts with
// this one and the answer (render of the messages and the answer).
func render(msgs []chatMessage) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|" + m.Role + "|>" + m.Content + "<|end|>")
	}
	return b.String()
}

// ServeHTTP answers the routes of an OpenAI-compatible server: the
// health check, the model list and the two completion endpoints.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/health":
		w.WriteHeader(http.StatusOK)
		return
	case "/v1/models":
		writeJSON(w, map[string]any{"object": "list", "data": []map[string]any{{"id": "sim", "object": "model", "owned_by": "bench"}}})
		return
	case "/v1/chat/completions", "/v1/completions":
	default:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		w.WriteHeader(http.StatusBadRequest)
		writeJSON(w, map[string]any{"error": map[string]any{"message": err.Error(), "type": "invalid_request_error"}})
		return
	}
	s.complete(w, r, &req, r.URL.Path == "/v1/chat/completions")
}

// complete answers a completion request (a chat's when chat is set): it
// waits for a slot, sleeps for the prefill of what the cache lacks, then
// sends the answer streamed or whole, holding the slot until it is sent.
func (s *Server) complete(w http.ResponseWriter, r *http.Request, req *chatRequest, chat bool) {
	var prompt string
	if chat {
		prompt = render(req.Messages)
	} else {
		prompt = fmt.Sprint(req.Prompt)
	}
	tokens := req.MaxTokens
	if tokens <= 0 {
		tokens = 16
	}
	answer := answerFor(prompt, tokens)

	// Wait for a slot, then prefill what the cache lacks.
	select {
	case s.slots <- struct{}{}:
	case <-r.Context().Done():
		return
	}
	s.busy.Add(1)
	defer func() { s.busy.Add(-1); <-s.slots }()
	hs := s.blocks(prompt)
	hit := s.cached(hs) * s.cfg.BlockBytes
	s.Requests.Add(1)
	s.PromptBytes.Add(int64(len(prompt)))
	s.CachedBytes.Add(int64(hit))
	if !sleep(r, s.cfg.Base+time.Duration(len(prompt)-hit)*s.cfg.PerByte) {
		return
	}
	s.store(hs)
	h := w.Header()
	h.Set("X-Server", s.Name)
	h.Set("X-Prompt-Bytes", strconv.Itoa(len(prompt)))
	h.Set("X-Cached-Bytes", strconv.Itoa(hit))
	c := completion{id: "cmpl-" + strconv.FormatUint(hs0(hs), 36), created: time.Now().Unix(), model: req.Model, chat: chat,
		answer: answer, words: strings.SplitAfter(answer, " ")}
	if req.Stream {
		if !s.stream(w, r, &c) {
			return
		}
	} else if !s.whole(w, r, &c, len(prompt), hit) {
		return
	}
	// The answer's blocks are cached too: the next turn's prompt starts
	// with this prompt and this answer.
	if chat {
		s.store(s.blocks(prompt + render([]chatMessage{{Role: "assistant", Content: answer}})))
	}
}

// completion is the answer to one completion request, as its response
// objects carry it.
type completion struct {
	id      string
	created int64
	model   string
	chat    bool // a chat completion's objects, not a text completion's
	answer  string
	words   []string // answer split after each space: one token each
}

// stream sends c as server-sent events, one chunk a token, PerToken
// apart, then the final chunk and [DONE]; false when the client went.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, c *completion) bool {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	for i, word := range c.words {
		if i > 0 && !sleep(r, s.cfg.PerToken) {
			return false
		}
		writeEvent(w, c.chunk(word, i == 0))
		f.Flush()
	}
	writeEvent(w, c.final())
	fmt.Fprint(w, "data: [DONE]\n\n")
	f.Flush()
	return true
}

// chunk is the streamed object of one token; the first of a chat's names
// the assistant's role.
func (c *completion) chunk(word string, first bool) map[string]any {
	if !c.chat {
		return map[string]any{"id": c.id, "object": "text_completion", "created": c.created, "model": c.model,
			"choices": []map[string]any{{"index": 0, "text": word, "finish_reason": nil}}}
	}
	delta := map[string]any{"content": word}
	if first {
		delta["role"] = "assistant"
	}
	return map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
		"choices": []map[string]any{{"index": 0, "delta": delta, "finish_reason": nil}}}
}

// final is the streamed object after the last token, which says why it
// stopped.
func (c *completion) final() map[string]any {
	if !c.chat {
		return map[string]any{"id": c.id, "object": "text_completion", "created": c.created, "model": c.model,
			"choices": []map[string]any{{"index": 0, "text": "", "finish_reason": "stop"}}}
	}
	return map[string]any{"id": c.id, "object": "chat.completion.chunk", "created": c.created, "model": c.model,
		"choices": []map[string]any{{"index": 0, "delta": map[string]any{}, "finish_reason": "stop"}}}
}

// whole sends c as one JSON object after the decode time of all its
// tokens but the first, with the usage of a prompt of promptBytes of
// which hit were cached; false when the client went.
func (s *Server) whole(w http.ResponseWriter, r *http.Request, c *completion, promptBytes, hit int) bool {
	if !sleep(r, time.Duration(len(c.words)-1)*s.cfg.PerToken) {
		return false
	}
	usage := map[string]any{"prompt_tokens": promptBytes / 4, "completion_tokens": len(c.words), "total_tokens": promptBytes/4 + len(c.words),
		"prompt_tokens_details": map[string]any{"cached_tokens": hit / 4}}
	if c.chat {
		writeJSON(w, map[string]any{"id": c.id, "object": "chat.completion", "created": c.created, "model": c.model,
			"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": c.answer}, "finish_reason": "stop"}},
			"usage":   usage})
	} else {
		writeJSON(w, map[string]any{"id": c.id, "object": "text_completion", "created": c.created, "model": c.model,
			"choices": []map[string]any{{"index": 0, "text": c.answer, "finish_reason": "stop"}}, "usage": usage})
	}
	return true
}

func hs0(hs []uint64) uint64 {
	if len(hs) == 0 {
		return uint64(time.Now().UnixNano())
	}
	return hs[len(hs)-1]
}

// answerFor is the answer the server "generates" for a prompt: n words,
// the same every time for the same prompt.
func answerFor(prompt string, n int) string {
	var m maphash.Hash
	m.SetSeed(blockSeed)
	m.WriteString(prompt)
	x := m.Sum64()
	words := make([]string, n)
	for i := range words {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		words[i] = vocabulary[x%uint64(len(vocabulary))]
	}
	return strings.Join(words, " ")
}

var vocabulary = strings.Fields("the a model cache token server prefix key ring load answer request stream block turn user system prompt route hit miss fast slow")

// sleep waits d, or until the client goes; false when it went.
func sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

func writeEvent(w http.ResponseWriter, v any) {
	b, _ := json.Marshal(v)
	w.Write([]byte("data: "))
	w.Write(b)
	w.Write([]byte("\n\n"))
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
