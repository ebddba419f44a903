package main

import (
	"strings"
	"testing"

	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// TestLLMConfig: examples/configs/llm.yaml, the starting point for LLM
// inference servers, validates, keys on the prompt's prefix (after a
// prompt_cache_key the client may send) with a cut that holds a system
// prompt and a first question, turns bounded loads and hold on, lets
// streams live, and validate says what the prefix source keys on.
func TestLLMConfig(t *testing.T) {
	const path = "../../examples/configs/llm.yaml"
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	keys := cfg.Hash.Key
	if len(keys) < 2 || keys[0].Kind != key.JSON || keys[0].Name != "prompt_cache_key" || keys[1].Kind != key.Prefix || keys[1].Bytes < 4096 || keys[1].Bytes > cfg.Hash.BodyLimit {
		t.Errorf("hash.key = %+v; want json: prompt_cache_key, then prefix with bytes of at least 4096, within body_limit %d", keys, cfg.Hash.BodyLimit)
	}
	if cfg.Ring.LoadFactor != 1.25 || cfg.Ring.LoadFloor < 1 || !cfg.Hold.On() {
		t.Errorf("ring %+v, hold %+v: want bounded loads (1.25) and hold on", cfg.Ring, cfg.Hold)
	}
	if cfg.Timeouts.Read < 60e9 || cfg.Timeouts.ResponseHeader < 60e9 {
		t.Errorf("timeouts %+v: a prefill and the pause between tokens need a minute or more", cfg.Timeouts)
	}
	code, out, errOut := runCmd(t, "validate", "-config", path)
	if code != exitOK || !strings.Contains(out, "hash.key[1] (prefix 8192 bytes) keys on the body's model, then its messages") {
		t.Errorf("validate: exit %d\n%s%s", code, out, errOut)
	}
}
