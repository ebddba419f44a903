package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ringlb/ringlb/balancer"
	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/balancer/metrics"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// TestOpenAINodeSDK runs the official OpenAI SDK for Node.js (the npm
// package openai, pinned in sdk/package.json and installed into
// sdk/node_modules by `npm ci --prefix bench/llm/sdk`, as .ci/run does)
// through ringlb, keyed on the prompt's prefix, against three fake model
// servers: streamed and plain chat completions and a plain completion
// come back as the SDK expects them, and every turn of the conversation
// is served by one upstream.
func TestOpenAINodeSDK(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		testenv.SkipExternal(t, "node", "not on PATH (the OpenAI SDK for Node.js runs on it)")
	}
	if _, err := os.Stat(filepath.Join("sdk", "node_modules", "openai", "package.json")); err != nil {
		testenv.SkipExternal(t, "openai (npm)", "not installed: npm ci --prefix bench/llm/sdk")
	}
	cfg := DefaultSim().Server
	cfg.Base, cfg.PerByte, cfg.PerToken = time.Millisecond, time.Microsecond, time.Millisecond
	var opts balancer.Options
	var us []*url.URL
	for i := range 3 {
		u, stop := serve(NewServer(fmt.Sprintf("gpu-%d", i+1), cfg))
		t.Cleanup(stop)
		pu, _ := url.Parse(u)
		us = append(us, pu)
	}
	opts = ringlbOptions(Scenario{Keys: []key.Source{{Kind: key.Prefix, Bytes: 4096}}, LoadFactor: 1.25, LoadFloor: 8, Hold: true}, us)
	opts.UpstreamHeader = "X-Upstream"
	b, err := balancer.New(opts, metrics.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	front, stop := serve(b)
	t.Cleanup(stop)

	cmd := exec.Command(node, "chat.mjs")
	cmd.Dir = "sdk"
	cmd.Env = append(os.Environ(), "RINGLB_URL="+front, "TURNS=4")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node chat.mjs: %v\n%s\n%s", err, out, stderr.String())
	}
	type line struct {
		Kind, Content, Server, Upstream string
		Turn, Chunks                    int
		Stream                          bool
	}
	var chats []line
	var completion *line
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("%q: %v", sc.Text(), err)
		}
		if l.Kind == "completion" {
			completion = &l
		} else {
			chats = append(chats, l)
		}
	}
	t.Logf("the SDK printed:\n%s", out)
	if len(chats) != 4 || completion == nil {
		t.Fatalf("the SDK printed:\n%s", out)
	}
	for _, l := range chats {
		if l.Content == "" || len(strings.Fields(l.Content)) != 12 || l.Server == "" || l.Upstream != l.Server {
			t.Errorf("turn %d (stream %v): %+v; want 12 words from a server, named by X-Upstream too", l.Turn, l.Stream, l)
		}
		if l.Stream && l.Chunks < 12 {
			t.Errorf("turn %d came in %d chunks, want one per token and more", l.Turn, l.Chunks)
		}
		if l.Upstream != chats[0].Upstream {
			t.Errorf("turn %d went to %s, turn 0 to %s: a conversation's turns must share an upstream", l.Turn, l.Upstream, chats[0].Upstream)
		}
	}
	if len(strings.Fields(completion.Content)) != 5 || completion.Upstream == "" {
		t.Errorf("completion: %+v", *completion)
	}
}
