package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/cmd/ringlb/process"
)

// configWatchInterval is how often serve looks at the config file for a
// change on disk, as at the certificate files; a variable so tests can
// shorten it.
var configWatchInterval = 2 * time.Second

func cmdServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, p := newCommand("serve", "serve [-config config.yaml | config.yaml] [-watch=false]", stdout, stderr)
	watch := c.fs.Bool("watch", true, "reload the config file when it changes on disk (looked at every 2s)")
	if code, ok := c.parse(args); !ok {
		return code
	}
	cfg, err := config.Load(*p)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFail
	}
	interval := configWatchInterval
	if !*watch {
		interval = 0
	}
	return runProcess(ctx, process.Options{Path: *p, Config: cfg, Logger: slog.New(slog.NewTextHandler(stderr, nil)), Watch: interval})
}

// runProcess runs the serving process until ctx is done and returns the
// exit code. The process logs its own failures.
func runProcess(ctx context.Context, o process.Options) int {
	o.Version = buildVersion()
	if err := process.Run(ctx, o); err != nil {
		return exitFail
	}
	return exitOK
}

// loadCommand parses the flags of a command that takes only -config and
// loads its config; ok is false when the command should exit with code.
func loadCommand(name string, args []string, stdout, stderr io.Writer) (path string, cfg *config.Config, code int, ok bool) {
	c, p := newCommand(name, name+" [-config config.yaml | config.yaml]", stdout, stderr)
	if code, ok := c.parse(args); !ok {
		return "", nil, code, false
	}
	cfg, err := config.Load(*p)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return "", nil, exitFail, false
	}
	return *p, cfg, exitOK, true
}
