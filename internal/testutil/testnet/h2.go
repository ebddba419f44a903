package testnet

import (
	"bytes"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// H2Request sends one HTTP/2 request on c, a fresh connection to an
// HTTP/2 server (h2c with prior knowledge, or TLS that negotiated h2),
// written frame by frame so that it may hold fields Go's clients refuse
// to send: fields are name, value pairs, pseudo-headers first, encoded as
// given, and the request has no body. It reads until the stream ends
// (within 20s) and returns the final status and the body; a reset stream
// or a GOAWAY returns status 0 and says which in ended ("stream reset:
// CODE", "connection ended: CODE").
func H2Request(t testing.TB, c net.Conn, fields ...string) (status int, body []byte, ended string) {
	t.Helper()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for i := 0; i+1 < len(fields); i += 2 {
		enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("reading the response to %q: %v", fields, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != 1 {
				continue
			}
			if n, _ := strconv.Atoi(f.PseudoValue("status")); n >= 200 {
				status = n
			}
			if f.StreamEnded() {
				return status, body, ""
			}
		case *http2.DataFrame:
			if f.StreamID != 1 {
				continue
			}
			body = append(body, f.Data()...)
			if f.StreamEnded() {
				return status, body, ""
			}
		case *http2.RSTStreamFrame:
			return 0, nil, "stream reset: " + f.ErrCode.String()
		case *http2.GoAwayFrame:
			return 0, nil, "connection ended: " + f.ErrCode.String()
		}
	}
}
