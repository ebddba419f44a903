package key

// Random request bodies for TestPrefixKeyMatchesReference: chat,
// completion and responses bodies as values, and JSON writers that write
// the same values many ways.

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
)

// randomBody is a random request body as values: a chat, completion or
// responses body, with other fields around.
func randomBody(rng *rand.Rand) []kv {
	var fields []kv
	if rng.IntN(8) > 0 {
		fields = append(fields, kv{"model", randomModel(rng)})
	}
	switch rng.IntN(6) {
	case 0, 1, 2:
		var msgs []any
		for range rng.IntN(5) {
			role := []string{"system", "user", "assistant", "tool", "developer"}[rng.IntN(5)]
			m := []kv{{"role", role}, {"content", randomString(rng, 60)}}
			if rng.IntN(3) == 0 {
				m = append(m, kv{"name", randomString(rng, 8)})
			}
			if rng.IntN(4) == 0 {
				m = append(m, kv{"tool_calls", []any{randomValue(rng, 2)}})
			}
			rng.Shuffle(len(m), func(i, j int) { m[i], m[j] = m[j], m[i] })
			msgs = append(msgs, m)
		}
		fields = append(fields, kv{"messages", msgs})
	case 3:
		if rng.IntN(2) == 0 {
			fields = append(fields, kv{"prompt", randomString(rng, 100)})
		} else {
			fields = append(fields, kv{"prompt", []any{randomString(rng, 30), randomNumber(rng)}})
		}
	case 4:
		if rng.IntN(2) == 0 {
			fields = append(fields, kv{"input", randomString(rng, 100)})
		} else {
			fields = append(fields, kv{"input", []any{[]kv{{"role", "user"}, {"content", []any{[]kv{{"type", "input_text"}, {"text", randomString(rng, 40)}}}}}}})
		}
	}
	for range rng.IntN(4) {
		fields = append(fields, kv{[]string{"temperature", "stream", "max_tokens", "user", "metadata", "n"}[rng.IntN(6)] + strconv.Itoa(rng.IntN(3)), randomValue(rng, 2)})
	}
	rng.Shuffle(len(fields), func(i, j int) { fields[i], fields[j] = fields[j], fields[i] })
	return fields
}

// kv is an object member, for bodies that keep their members' order.
type kv struct {
	k string
	v any
}

func randomModel(rng *rand.Rand) any {
	switch rng.IntN(6) {
	case 0:
		return randomValue(rng, 2)
	case 1:
		return randomString(rng, 20)
	}
	return []string{"llama-3.1-8b-instruct", "qwen2.5-72b", "gpt-4o", "mistral"}[rng.IntN(4)]
}

func randomValue(rng *rand.Rand, d int) any {
	switch k := rng.IntN(8); {
	case k == 0 && d > 0:
		var m []kv
		seen := map[string]bool{}
		for range rng.IntN(5) {
			name := randomString(rng, 4)
			if seen[name] {
				continue
			}
			seen[name] = true
			m = append(m, kv{name, randomValue(rng, d-1)})
		}
		return m
	case k == 1 && d > 0:
		var a []any
		for range rng.IntN(4) {
			a = append(a, randomValue(rng, d-1))
		}
		return a
	case k == 2:
		return []any{true, false, nil}[rng.IntN(3)]
	case k < 5:
		return randomNumber(rng)
	}
	return randomString(rng, 12)
}

// number is a number's text as the body writes it.
type number string

func randomNumber(rng *rand.Rand) number {
	switch rng.IntN(8) {
	case 0:
		return number(strconv.Itoa(rng.IntN(1000) - 500))
	case 1:
		return number([]string{"-0", "0", "0.0", "-0.0e0", "1E2", "1e21", "1e20", "1e-6", "1e-7", "123456789012345678901", "9007199254740993", "0.1", "5e-324", "1.7976931348623157e308"}[rng.IntN(14)])
	case 2:
		return number(strconv.FormatInt(rng.Int64(), 10))
	}
	f := math.Float64frombits(rng.Uint64())
	for math.IsNaN(f) || math.IsInf(f, 0) {
		f = math.Float64frombits(rng.Uint64())
	}
	if rng.IntN(2) == 0 {
		f = float64(float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(40)-20))))
	}
	return number(strconv.FormatFloat(f, []byte("eEfg")[rng.IntN(4)], -1, 64))
}

// randomString draws up to n characters: ASCII, quotes and backslashes,
// controls, Latin, CJK, private-use characters past U+E000 and
// characters beyond the BMP (which sort differently in UTF-16).
func randomString(rng *rand.Rand, n int) string {
	var b strings.Builder
	for range rng.IntN(n + 1) {
		switch rng.IntN(12) {
		case 0:
			b.WriteRune(rune(rng.IntN(0x20)))
		case 1:
			b.WriteByte(`"\/`[rng.IntN(3)])
		case 2:
			b.WriteRune(rune(0xa0 + rng.IntN(0x100)))
		case 3:
			b.WriteRune(rune(0x4e00 + rng.IntN(0x100)))
		case 4:
			b.WriteRune(rune(0xe000 + rng.IntN(0x2000)))
		case 5:
			b.WriteRune(rune(0x1f600 + rng.IntN(0x50)))
		case 6:
			b.WriteRune(0x7f)
		default:
			b.WriteByte(byte('a' + rng.IntN(26)))
		}
	}
	return b.String()
}

// encodeRandom writes v as JSON with random whitespace, escapes and
// member order left as v has it.
func encodeRandom(rng *rand.Rand, v any) string {
	var b strings.Builder
	var enc func(v any)
	ws := func() {
		if rng.IntN(4) == 0 {
			b.WriteString([]string{" ", "\n", "\t", "\r\n  "}[rng.IntN(4)])
		}
	}
	enc = func(v any) {
		ws()
		switch v := v.(type) {
		case nil:
			b.WriteString("null")
		case bool:
			b.WriteString(strconv.FormatBool(v))
		case number:
			b.WriteString(string(v))
		case string:
			encodeString(rng, &b, v)
		case []any:
			b.WriteByte('[')
			for i, e := range v {
				if i > 0 {
					ws()
					b.WriteByte(',')
				}
				enc(e)
			}
			ws()
			b.WriteByte(']')
		case []kv:
			b.WriteByte('{')
			for i, m := range v {
				if i > 0 {
					b.WriteByte(',')
				}
				ws()
				encodeString(rng, &b, m.k)
				ws()
				b.WriteByte(':')
				enc(m.v)
			}
			ws()
			b.WriteByte('}')
		default:
			panic(fmt.Sprintf("%T", v))
		}
		ws()
	}
	enc(v)
	return b.String()
}

func encodeString(rng *rand.Rand, b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || rng.IntN(6) == 0:
			if r >= 0x10000 {
				r1, r2 := utf16Pair(r)
				fmt.Fprintf(b, `\u%04x\u%04X`, r1, r2)
			} else if i := slices.Index([]rune("\b\f\n\r\t/"), r); i >= 0 && rng.IntN(2) == 0 {
				b.WriteByte('\\')
				b.WriteByte("bfnrt/"[i])
			} else {
				fmt.Fprintf(b, []string{`\u%04x`, `\u%04X`}[rng.IntN(2)], r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
}

func utf16Pair(r rune) (rune, rune) {
	r -= 0x10000
	return 0xd800 + r>>10, 0xdc00 + r&0x3ff
}
