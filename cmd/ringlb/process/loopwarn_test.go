package process

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/cmd/ringlb/internal/ringlbtest"
	"github.com/ringlb/ringlb/internal/testutil/testenv"
)

// An upstream that is ringlb's own listener is reported, not refused:
// serve warns when it starts and after each reload that keeps it
// (validate's warning is the command's test of the same name).
func TestUpstreamLoopWarning(t *testing.T) {
	loop := "listen: 127.0.0.1:18089\nupstreams:\n  - name: me\n    url: http://localhost:18089\n  - name: other\n    url: http://127.0.0.1:18090\n"
	want := "upstreams[0] (me): http://localhost:18089 is ringlb's own listen address (127.0.0.1:18089): requests sent there come back into ringlb"
	path := ringlbtest.WriteConfig(t, loop)
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	logs := &testenv.Buffer{}
	s, err := newServer(path, cfg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	if n := strings.Count(logs.String(), "upstream loops back"); n != 1 || !strings.Contains(logs.String(), strconv.Quote(want)) {
		t.Errorf("serve logged %d loop warnings, want 1 with %q:\n%s", n, want, logs.String())
	}
	if _, _, err := s.reload(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "upstream loops back"); n != 2 {
		t.Errorf("after a reload: %d loop warnings, want 2:\n%s", n, logs.String())
	}
}
