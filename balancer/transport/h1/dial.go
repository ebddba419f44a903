package h1

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// New connections: the dial, the TLS handshake, and the wrapping for the
// pool.

// dial opens a new connection for key.
func (t *Transport) dial(ctx context.Context, key connKey) (*persistConn, error) {
	addr := key.host
	if _, _, err := net.SplitHostPort(addr); err != nil {
		port := "80"
		if key.tls {
			port = "443"
		}
		addr = net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(addr, "["), "]"), port)
	}
	dctx := ctx
	if t.DialTimeout > 0 {
		var cancel context.CancelFunc
		dctx, cancel = context.WithTimeout(ctx, t.DialTimeout)
		defer cancel()
	}
	var c net.Conn
	var err error
	if t.Dial != nil {
		c, err = t.Dial(dctx, "tcp", addr)
	} else {
		d := net.Dialer{KeepAlive: 30 * time.Second}
		c, err = d.DialContext(dctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	pc := t.newConn(c, key)
	if key.tls {
		if err := pc.handshake(ctx, t, addr); err != nil {
			c.Close()
			return nil, err
		}
	}
	return pc, nil
}

// handshake replaces pc's connection with a TLS client over it.
func (pc *persistConn) handshake(ctx context.Context, t *Transport, addr string) error {
	var cfg *tls.Config
	if t.TLSClientConfig != nil {
		cfg = t.TLSClientConfig.Clone()
	} else {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr)
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"http/1.1"}
	rec := &recordConn{Conn: pc.conn}
	tc := tls.Client(rec, cfg)
	hctx := ctx
	if t.TLSHandshakeTimeout > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, t.TLSHandshakeTimeout)
		defer cancel()
	}
	if err := tc.HandshakeContext(hctx); err != nil {
		if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			return errHandshakeTimeout
		}
		return err
	}
	st := tc.ConnectionState()
	if p := st.NegotiatedProtocol; p != "" && p != "http/1.1" {
		return fmt.Errorf("h1: upstream negotiated protocol %q", p)
	}
	pc.conn = tc
	pc.cr.c = tc
	pc.cw.c = tc
	pc.tc, pc.rec = tc, rec // pc.raw stays the socket's: the idle peek still looks at it
	pc.tls = &st
	return nil
}

// newConn wraps c for the pool.
func (t *Transport) newConn(c net.Conn, key connKey) *persistConn {
	pc := &persistConn{t: t, key: key, conn: c}
	pc.cr.c = c
	pc.cw.c = c
	pc.abort = pc.close
	pc.initPeek()
	return pc
}
