package main

import (
	"net"
	"testing"

	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
)

func TestServeRefusesBusyListener(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	path := ringlbtest.WriteConfig(t, "listen: "+l.Addr().String()+"\nadmin_listen: 127.0.0.1:0\n"+upstreamsYAML(1))
	code, _, _ := runCmd(t, "serve", "-config", path)
	if code != exitFail {
		t.Errorf("serve on a busy port: exit %d, want %d", code, exitFail)
	}
}
