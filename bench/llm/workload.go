package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Workload is the traffic: conversations starting at a steady rate, each
// opening with one of a few shared system prompts (the popular ones far
// more often: Zipf) and a question of its own, then going on for Turns
// turns, each sending the whole history again, Think apart.
type Workload struct {
	Rate          float64       // conversations started per second
	Duration      time.Duration // how long new conversations start
	Turns         int
	Think         time.Duration
	SystemPrompts int
	SystemBytes   int
	Zipf          float64 // the exponent s of the system prompts' popularity, > 1
	UserBytes     [2]int  // a user message's size, from [0] to [1]
	MaxTokens     int
	Seed          int64
}

// Turn is one request of a conversation as the client saw it.
type Turn struct {
	Conv, Turn   int
	Server       string
	Start        time.Duration // since the run began
	TTFT, Total  time.Duration
	Prompt, Hit  int // prompt bytes, and those the server had cached
	Tokens       int
	Status       int
	Err          string
	Conversation bool // the conversation began before the scale-out and goes on after it
}

// systemPrompt is shared system prompt i, size bytes of it.
func systemPrompt(i, size int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are assistant #%d of the example company. ", i)
	r := rand.New(rand.NewSource(int64(i) + 1000))
	for b.Len() < size {
		b.WriteString(words[r.Intn(len(words))])
		b.WriteByte(' ')
	}
	return b.String()[:size]
}

// userMessage is a conversation's turn t message.
func userMessage(r *rand.Rand, conv, t int, size [2]int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Conversation %d, question %d: ", conv, t)
	n := size[0] + r.Intn(size[1]-size[0]+1)
	for b.Len() < n {
		b.WriteString(words[r.Intn(len(words))])
		b.WriteByte(' ')
	}
	return b.String()
}

var words = strings.Fields(`report quarter revenue margin customer churn forecast pipeline region
	product launch budget hiring plan risk compliance audit contract renewal support ticket latency
	outage incident review deploy rollback cluster capacity storage network invoice payment refund
	shipment warehouse supplier inventory price discount campaign survey feedback roadmap feature`)

// client sends the turns of conversations to one front end.
type client struct {
	url    string
	http   *http.Client
	model  string
	header string // the session header's name ("" for none)
}

// turn sends one request, streamed, and returns the answer and what it
// saw.
func (c *client) turn(ctx context.Context, conv int, msgs []chatMessage, maxTokens int) (string, Turn) {
	body, _ := json.Marshal(map[string]any{"model": c.model, "messages": msgs, "max_tokens": maxTokens, "stream": true})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if c.header != "" {
		req.Header.Set(c.header, "conv-"+strconv.Itoa(conv))
	}
	t := Turn{Conv: conv}
	start := time.Now()
	res, err := c.http.Do(req)
	if err != nil {
		t.Err = err.Error()
		return "", t
	}
	defer res.Body.Close()
	t.Status = res.StatusCode
	t.Server = res.Header.Get("X-Server")
	t.Prompt, _ = strconv.Atoi(res.Header.Get("X-Prompt-Bytes"))
	t.Hit, _ = strconv.Atoi(res.Header.Get("X-Cached-Bytes"))
	if res.StatusCode != http.StatusOK {
		t.Err = res.Status
		return "", t
	}
	var answer strings.Builder
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct{ Content string } `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(line), &chunk) != nil || len(chunk.Choices) == 0 {
			continue
		}
		if d := chunk.Choices[0].Delta.Content; d != "" {
			if t.Tokens == 0 {
				t.TTFT = time.Since(start)
			}
			t.Tokens++
			answer.WriteString(d)
		}
	}
	t.Total = time.Since(start)
	if err := sc.Err(); err != nil {
		t.Err = err.Error()
	}
	return answer.String(), t
}

// run plays the workload against c: conversation i starts at i/Rate and
// runs its turns one after the other. It returns every turn, when every
// conversation is over. at, when not nil, is called at half the
// duration, the scale-out point.
func (w Workload) run(ctx context.Context, c *client, at func()) []Turn {
	var (
		mu    sync.Mutex
		turns []Turn
		wg    sync.WaitGroup
	)
	begin := time.Now()
	sys := make([]string, w.SystemPrompts)
	for i := range sys {
		sys[i] = systemPrompt(i, w.SystemBytes)
	}
	r := rand.New(rand.NewSource(w.Seed))
	zipf := rand.NewZipf(r, w.Zipf, 1, uint64(w.SystemPrompts-1))
	n := int(w.Rate * w.Duration.Seconds())
	var once sync.Once
	for i := range n {
		startAt := time.Duration(float64(i) / w.Rate * float64(time.Second))
		if at != nil && startAt >= w.Duration/2 {
			once.Do(func() {
				time.Sleep(time.Until(begin.Add(w.Duration / 2)))
				at()
			})
		}
		time.Sleep(time.Until(begin.Add(startAt)))
		s := sys[zipf.Uint64()]
		seed := r.Int63()
		wg.Add(1)
		go func(conv int) {
			defer wg.Done()
			r := rand.New(rand.NewSource(seed))
			msgs := []chatMessage{{Role: "system", Content: s}}
			for t := range w.Turns {
				if t > 0 {
					time.Sleep(w.Think)
				}
				msgs = append(msgs, chatMessage{Role: "user", Content: userMessage(r, conv, t, w.UserBytes)})
				st := time.Since(begin)
				answer, tr := c.turn(ctx, conv, msgs, w.MaxTokens)
				tr.Turn, tr.Start = t, st
				mu.Lock()
				turns = append(turns, tr)
				mu.Unlock()
				if tr.Err != "" {
					return
				}
				msgs = append(msgs, chatMessage{Role: "assistant", Content: answer})
			}
		}(i)
	}
	wg.Wait()
	return turns
}
