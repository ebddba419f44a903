// Command ringlb is an HTTP reverse proxy that keeps each client's requests
// on the same upstream with a weighted consistent-hash ring.
//
// Usage:
//
//	ringlb serve    [-config config.yaml | config.yaml] [-watch=false]
//	ringlb validate [-config config.yaml | config.yaml]
//	ringlb simulate [-config config.yaml | config.yaml] [-keys N] [-add NAME[=WEIGHT]]... [-remove NAME]...
//	                [-drain NAME]... [-pool NAME]
//	ringlb demo     [-config config.yaml | config.yaml]
//	ringlb version  (also: ringlb --version)
//
// Exit codes: 0 ok, 1 bad config or failed run, 2 bad usage.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"
)

// version is stamped at build time with -ldflags "-X main.version=..."
// (the Dockerfile does); unstamped, buildVersion reads the build's VCS
// information instead.
var version = "dev"

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

const usage = `ringlb: a consistent-hash HTTP reverse proxy

Usage:
  ringlb serve    [-config config.yaml] [-watch=false]
                                          run the proxy (also: ringlb with no subcommand); it reloads
                                          the config file when it changes on disk unless -watch=false
  ringlb validate [-config config.yaml]   check a config
  ringlb simulate [-config config.yaml] [-keys 1000000] [-add NAME[=WEIGHT]]... [-remove NAME]...
                  [-drain NAME]... [-pool NAME]
                                          offline: key shares, keys moved by a membership change
                                          (-add, -remove) or by draining (-drain); -pool picks the
                                          pool of a config with several
  ringlb demo     [-config config.yaml]   run demo upstreams in-process with the proxy in front
  ringlb version                          print the version (also: ringlb --version)

Run 'ringlb COMMAND -h' for a command's flags. The config file may also be
given as the one argument: 'ringlb validate ringlb.yaml'. With no command,
ringlb serves: 'ringlb -config FILE' is 'ringlb serve -config FILE'.
`

// defaultGCPercent is the garbage collector's target (GOGC) when the
// environment sets none. Almost everything a proxy allocates dies with its
// request and its live heap is small, so at Go's default of 100 it collects
// every few hundred requests. At 150 it collects a third less often, for
// about a third more heap at the peak: in CPU profiles under
// bench/run.sh's load the collector's share is 7.3 % of ringlb's CPU at
// 100, 4.2 % at 200; the peak RSS 26.5, 27.8-28.8 and 30.5 MiB at 100, 150
// and 200 (Go's minimum heap goal, 4 MiB at 100, scales with it). 150
// keeps the peak within twice nginx's (bench/PROFILE.md). A GOGC in the
// environment, 100 and off included, is used as it is.
const defaultGCPercent = 150

func main() {
	if _, ok := os.LookupEnv("GOGC"); !ok {
		debug.SetGCPercent(defaultGCPercent)
	}
	// SIGQUIT is a graceful quit, as nginx users expect, rather than Go's
	// goroutine dump and exit 2.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGQUIT)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run dispatches a command line and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	switch {
	case len(args) > 0 && (len(args[0]) == 0 || args[0][0] != '-'):
		cmd, args = args[0], args[1:]
	case len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help"):
		cmd = "help" // `ringlb -h`: the commands, not serve's flags alone
	case len(args) > 0 && (args[0] == "-version" || args[0] == "--version"):
		cmd, args = "version", args[1:]
	}
	switch cmd {
	case "serve":
		return cmdServe(ctx, args, stdout, stderr)
	case "validate":
		return cmdValidate(args, stdout, stderr)
	case "simulate":
		return cmdSimulate(args, stdout, stderr)
	case "demo":
		return cmdDemo(ctx, args, stdout, stderr)
	case "version":
		return cmdVersion(args, stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "ringlb: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// buildVersion describes this binary for `ringlb version` and the start
// log line; see versionString.
func buildVersion() string {
	bi, _ := debug.ReadBuildInfo()
	return versionString(version, bi)
}

// versionString is the version stamped with -X main.version, or, when
// none was ("dev"), the module version the go command derived from the
// VCS (a pseudo-version such as v0.0.0-20260102150405-0123456789ab+dirty),
// followed by the VCS revision and the Go version, e.g.
//
//	v1.2.0 (revision 0123456789ab, go1.26.0)
//	v0.0.0-20260102150405-0123456789ab+dirty (revision 0123456789ab, modified, go1.26.0)
//
// A binary built without VCS information (go run, -buildvcs=false, or
// outside a git checkout) and not stamped says so.
func versionString(stamped string, bi *debug.BuildInfo) string {
	if bi == nil {
		return stamped
	}
	v := stamped
	if v == "dev" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		v = bi.Main.Version
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	switch {
	case rev == "" && v == "dev":
		return fmt.Sprintf("dev (no VCS revision: built by go run, with -buildvcs=false or outside a git checkout; %s)", bi.GoVersion)
	case rev == "":
		return fmt.Sprintf("%s (%s)", v, bi.GoVersion)
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if modified == "true" {
		rev += ", modified"
	}
	return fmt.Sprintf("%s (revision %s, %s)", v, rev, bi.GoVersion)
}

// command is a subcommand's flag set with the streams it reports on.
type command struct {
	fs       *flag.FlagSet
	synopsis string
	stdout   io.Writer
	stderr   io.Writer
	// config is the -config flag's value, nil for a command without one;
	// parse sets it from a positional argument too.
	config *string
}

// newCommand makes a subcommand's flag set with a -config flag. The
// config file may also be given as the command's one positional argument
// (`ringlb validate ringlb.yaml`), before or after the flags.
func newCommand(name, synopsis string, stdout, stderr io.Writer) (*command, *string) {
	fs := flag.NewFlagSet("ringlb "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // printed by parse, to stdout for -h and stderr otherwise
	cfg := fs.String("config", "config.yaml", "path of the YAML config file (or give it as the one argument)")
	return &command{fs: fs, synopsis: synopsis, stdout: stdout, stderr: stderr, config: cfg}, cfg
}

func (c *command) usage(w io.Writer) {
	fmt.Fprintf(w, "Usage: ringlb %s\n", c.synopsis)
	flags := false
	c.fs.VisitAll(func(*flag.Flag) { flags = true })
	if !flags {
		return // no flags to list under "Flags:"
	}
	fmt.Fprintf(w, "\nFlags:\n")
	c.fs.SetOutput(w)
	c.fs.PrintDefaults()
	c.fs.SetOutput(c.stderr)
}

// parse parses args; ok is false when the command should exit at once with
// code (0 for -h, 2 for bad usage).
func (c *command) parse(args []string) (code int, ok bool) {
	if code, ok := c.parseFlags(args); !ok {
		return code, false
	}
	if c.config != nil && c.fs.NArg() > 0 {
		// The config file as the positional argument; flags may follow it.
		file, rest := c.fs.Arg(0), c.fs.Args()[1:]
		if code, ok := c.parseFlags(rest); !ok {
			return code, false
		}
		explicit := false
		c.fs.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "config" })
		if explicit && *c.config != file {
			fmt.Fprintf(c.stderr, "%s: the config file given twice: -config %s and %s\n", c.fs.Name(), *c.config, file)
			c.usage(c.stderr)
			return exitUsage, false
		}
		*c.config = file
	}
	if c.fs.NArg() > 0 {
		fmt.Fprintf(c.stderr, "%s: unexpected argument %q\n", c.fs.Name(), c.fs.Arg(0))
		c.usage(c.stderr)
		return exitUsage, false
	}
	return exitOK, true
}

// parseFlags parses the flags in args, up to the first argument that is
// not one; ok is false when the command should exit with code.
func (c *command) parseFlags(args []string) (code int, ok bool) {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			c.usage(c.stdout)
			return exitOK, false
		}
		c.usage(c.stderr)
		return exitUsage, false
	}
	return exitOK, true
}

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ringlb version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {}
	c := &command{fs: fs, synopsis: "version\n\nPrints ringlb's version, the revision it was built from and its Go version\n(also: ringlb --version).", stdout: stdout, stderr: stderr}
	if code, ok := c.parse(args); !ok {
		return code
	}
	fmt.Fprintf(stdout, "ringlb %s\n", buildVersion())
	return exitOK
}
