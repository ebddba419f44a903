package accesslog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

func entry() *Entry {
	return &Entry{
		Time: time.Date(2026, 12, 1, 9, 8, 7, 6_000_000, time.FixedZone("x", 3600)), Remote: "[2001:db8::1]:5555",
		Method: "GET", Host: "shop.example", URI: "/a b?\"q\"=\x01\xff", Proto: "HTTP/1.1", Status: 200,
		BytesIn: 12, BytesOut: 345, Duration: 1500 * time.Microsecond, TTFB: time.Millisecond,
		Referer: "", UserAgent: "curl/8", Pool: "default", Upstream: "app-1", KeySource: "header:X-User-ID",
		KeyHash: "00000000deadbeef", Decision: "overflow", Skipped: []Skip{{"app-2", "full"}}, Attempts: 1,
		Cause: "", RequestID: "r1", TraceID: "4bf92f3577b34da6a3ce929d0e0e4736",
	}
}

// Every JSON line parses, with every documented field.
func TestJSON(t *testing.T) {
	var out bytes.Buffer
	l, err := New(JSON, "", &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	l.Log(entry())
	e := entry()
	e.Skipped, e.URI, e.UserAgent = nil, "/\u2028\"\\", "\x00"
	l.Log(e)
	sc := bufio.NewScanner(&out)
	var lines []map[string]any
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 2 {
		t.Fatalf("%d lines", len(lines))
	}
	want := map[string]any{
		"time": "2026-12-01T08:08:07.006Z", "remote": "[2001:db8::1]:5555", "method": "GET", "host": "shop.example",
		"uri": "/a b?\"q\"=\x01\ufffd", "protocol": "HTTP/1.1", "status": 200.0, "bytes_received": 12.0, "bytes_sent": 345.0,
		"duration": 0.0015, "upstream_ttfb": 0.001, "referer": "", "user_agent": "curl/8", "pool": "default",
		"upstream": "app-1", "key_source": "header:X-User-ID", "key_hash": "00000000deadbeef", "decision": "overflow",
		"skipped": []any{map[string]any{"name": "app-2", "reason": "full"}}, "attempts": 1.0, "cause": "", "handoff_from": "",
		"request_id": "r1", "trace_id": "4bf92f3577b34da6a3ce929d0e0e4736",
	}
	if !reflect.DeepEqual(lines[0], want) {
		t.Errorf("got  %v\nwant %v", lines[0], want)
	}
	if lines[1]["uri"] != "/\u2028\"\\" || lines[1]["user_agent"] != "\x00" || !reflect.DeepEqual(lines[1]["skipped"], []any{}) {
		t.Errorf("second line %v", lines[1])
	}
}

func TestCombined(t *testing.T) {
	var out bytes.Buffer
	l, _ := New(Combined, "", &out, nil)
	l.Log(entry())
	want := `2001:db8::1 - - [01/Dec/2026:09:08:07 +0100] "GET /a\x20b?\x22q\x22=\x01\xff HTTP/1.1" 200 345 "-" "curl/8"` +
		` host=shop.example bytes_received=12 duration=0.001500 upstream_ttfb=0.001000 pool=default upstream=app-1` +
		` key_source=header:X-User-ID key_hash=00000000deadbeef decision=overflow skipped=app-2:full attempts=1 cause=- handoff_from=- request_id=r1 trace_id=4bf92f3577b34da6a3ce929d0e0e4736` + "\n"
	if got := out.String(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestText(t *testing.T) {
	var out bytes.Buffer
	l, _ := New(Text, "", &out, nil)
	l.Log(entry())
	for _, f := range []string{`msg=request`, `decision=overflow`, `skipped=app-2:full`, `key_source=header:X-User-ID`, `request_id=r1`,
		`protocol=HTTP/1.1`, `bytes_received=12`, `bytes_sent=345`, `upstream_ttfb=1ms`, `user_agent=curl/8`} {
		if !strings.Contains(out.String(), f) {
			t.Errorf("text line lacks %s: %s", f, out.String())
		}
	}
}

// textKey matches a key of a log/slog text line (key=value, the value
// quoted when it holds a space).
var textKey = regexp.MustCompile(`(?:^| )([a-z_]+)=(?:"(?:[^"\\]|\\.)*"|\S*)`)

// The text format names its fields as the json format does, every one of
// them, in the same order (then slog's own time, level and msg lead).
func TestTextNamesAreJSONNames(t *testing.T) {
	var text, js bytes.Buffer
	lt, _ := New(Text, "", &text, nil)
	lj, _ := New(JSON, "", &js, nil)
	lt.Log(entry())
	lj.Log(entry())
	var textKeys []string
	for _, m := range textKey.FindAllStringSubmatch(strings.TrimSpace(text.String()), -1) {
		if k := m[1]; k != "time" && k != "level" && k != "msg" {
			textKeys = append(textKeys, k)
		}
	}
	dec := json.NewDecoder(&js)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("json line: %v %v", tok, err)
	}
	var jsonKeys []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if k != "time" {
			jsonKeys = append(jsonKeys, k.(string))
		}
	}
	if !reflect.DeepEqual(textKeys, jsonKeys) {
		t.Errorf("text keys %q\njson keys %q", textKeys, jsonKeys)
	}
}

// A file moved away (logrotate) is reopened: later lines go to the new one.
func TestReopen(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "access.log")
	l, err := New(JSON, p, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Log(entry())
	if err := os.Rename(p, p+".1"); err != nil {
		t.Fatal(err)
	}
	l.Log(entry()) // still the old file
	if err := l.Reopen(); err != nil {
		t.Fatal(err)
	}
	l.Log(entry())
	old, _ := os.ReadFile(p + ".1")
	cur, _ := os.ReadFile(p)
	if bytes.Count(old, []byte("\n")) != 2 || bytes.Count(cur, []byte("\n")) != 1 {
		t.Errorf("old file %d lines, new %d", bytes.Count(old, []byte("\n")), bytes.Count(cur, []byte("\n")))
	}
	if _, err := New(JSON, filepath.Join(dir, "no", "such", "dir"), nil, nil); err == nil {
		t.Error("no error for a file that cannot be made")
	}
	if _, err := New("xml", "", nil, nil); err == nil {
		t.Error("no error for format xml")
	}
}

func TestTraceID(t *testing.T) {
	for in, want := range map[string]string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01": "4bf92f3577b34da6a3ce929d0e0e4736",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01": "",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01": "",
		"garbage": "", "": "",
	} {
		if got := TraceID(in); got != want {
			t.Errorf("TraceID(%q) = %q, want %q", in, got, want)
		}
	}
}

// BenchmarkJSON is one JSON line's cost.
func BenchmarkJSON(b *testing.B) {
	l, _ := New(JSON, "", discard{}, nil)
	e := entry()
	b.ReportAllocs()
	for b.Loop() {
		l.Log(e)
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// The cached second and the hand-made fraction write what the time
// layouts write, across second boundaries and zones, for both formats.
func TestTimeText(t *testing.T) {
	var sj, sc secondCache // one per format, as a Logger has
	zones := []*time.Location{time.UTC, time.FixedZone("x", 3600), time.FixedZone("y", -5*3600-1800)}
	base := time.Date(2026, 12, 31, 23, 59, 58, 0, time.UTC)
	for i := 0; i < 400; i++ {
		tm := base.Add(time.Duration(i) * 7_777_777 * time.Nanosecond).In(zones[i/50%len(zones)])
		got := string(appendJSON(nil, &Entry{Time: tm}, &sj))
		want := `{"time":"` + tm.UTC().Format("2006-01-02T15:04:05.000Z07:00") + `"`
		if !strings.HasPrefix(got, want+",") {
			t.Fatalf("json %v: got %.40s, want %s", tm, got, want)
		}
		got = string(appendCombined(nil, &Entry{Time: tm}, &sc))
		want = "- - - [" + tm.Format("02/Jan/2006:15:04:05 -0700") + "]"
		if !strings.HasPrefix(got, want) {
			t.Fatalf("combined %v: got %.40s, want %s", tm, got, want)
		}
	}
}

// appendSeconds writes what strconv's 'f', 6 writes of the seconds.
func TestAppendSeconds(t *testing.T) {
	ds := []time.Duration{0, 1, 499, 501, 999, 1000, 1499, 1501, time.Millisecond, 1500 * time.Microsecond,
		time.Second - 1, time.Second, 59*time.Second + 999_999_499, 3 * time.Hour, -time.Millisecond}
	for d := time.Duration(3); d < 100*time.Second; d = d*3 + 7 {
		ds = append(ds, d)
	}
	for _, d := range ds {
		got := string(appendSeconds(nil, d))
		if want := strconv.FormatFloat(d.Seconds(), 'f', 6, 64); got != want {
			t.Errorf("%d ns: got %s, want %s", d, got, want)
		}
	}
	// A tie rounds up (strconv rounds the float, which may lie below it).
	if got := string(appendSeconds(nil, 2500)); got != "0.000003" {
		t.Errorf("2500 ns: got %s", got)
	}
}

// appendJSONString's output decodes to the string with each invalid
// byte replaced, and escapes what must not appear raw.
func TestAppendJSONString(t *testing.T) {
	for _, s := range []string{"", "plain ascii", `q"b\s`, "\x00\x1f\x7f\t\n", "é中😀", "\u2028x\u2029", "a\xffb\xc3", "\xe2\x82",
		strings.Repeat("long run of plain bytes ", 20) + "\"", "\xf0\x9f\x98"} {
		b := appendJSONString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q: %s: %v", s, b, err)
		}
		if want := string([]rune(s)); got != want {
			t.Errorf("%q: decodes to %q, want %q", s, got, want)
		}
		for _, c := range b {
			if c < 0x20 || c == 0x7f {
				t.Errorf("%q: raw control byte %#x in %s", s, c, b)
			}
		}
		if bytes.Contains(b, []byte("\u2028")) || bytes.Contains(b, []byte("\u2029")) {
			t.Errorf("%q: raw line separator in %s", s, b)
		}
	}
}
