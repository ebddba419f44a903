package main

import (
	"fmt"
	"io"

	"github.com/ringlb/ringlb/balancer/key"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
	"github.com/ringlb/ringlb/cmd/ringlb/process"
	"github.com/ringlb/ringlb/ring"
)

// ringMembers converts the config's upstreams to ring members.
func ringMembers(ups []config.Upstream) []ring.Member {
	ms := make([]ring.Member, len(ups))
	for i, u := range ups {
		ms[i] = ring.Member{Name: u.Name, Addr: u.Addr, Weight: u.Weight}
	}
	return ms
}

func ringOptions(cfg *config.Config) ring.Options {
	return ring.Options{Placement: cfg.Ring.Placement, PointsPerWeight: cfg.Ring.PointsPerWeight}
}

// poolConfig returns cfg as if p were its only pool: the process's
// settings with p's blocks at the top level, for the code that reads one
// pool's config (a copy: cfg is unchanged).
func poolConfig(cfg *config.Config, p *config.Pool) *config.Config {
	c := *cfg
	c.Pool, c.Pools, c.Routes = *p, nil, nil
	return &c
}

// poolSummary describes one pool for validate: its Summary and ring
// version, or that the version waits for discovery's answers.
func poolSummary(cfg *config.Config) (string, error) {
	if cfg.Discovery != nil {
		if len(cfg.Upstreams) > 0 {
			if _, err := ring.New(ringMembers(cfg.Upstreams), ringOptions(cfg)); err != nil {
				return "", err
			}
		}
		return cfg.Pool.Summary() + " (not resolved: the ring version depends on the answers)", nil
	}
	r, err := ring.New(ringMembers(cfg.Upstreams), ringOptions(cfg))
	if err != nil {
		return "", err
	}
	return cfg.Pool.Summary() + ", version " + r.Version(), nil
}

// loadRing loads a config file and builds its ring.
func loadRing(path string) (*config.Config, *ring.Ring, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return nil, nil, err
	}
	r, err := ring.New(ringMembers(cfg.Upstreams), ringOptions(cfg))
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, r, nil
}

func cmdValidate(args []string, stdout, stderr io.Writer) int {
	c, path := newCommand("validate", "validate [-config config.yaml | config.yaml]", stdout, stderr)
	if code, ok := c.parse(args); !ok {
		return code
	}
	cfg, err := config.Load(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFail
	}
	if len(cfg.Expired) > 0 {
		// It would be served, but no client that checks would accept it.
		fmt.Fprintln(stderr, cfg.Expired)
		return exitFail
	}
	for _, w := range process.LoopWarnings(cfg) {
		fmt.Fprintf(stderr, "%s: warning: %s\n", *path, w)
	}
	if cfg.Pools != nil {
		// One line for the file, one per pool.
		fmt.Fprintln(stdout, cfg.Summary())
		for _, p := range cfg.Serving() {
			line, err := poolSummary(poolConfig(cfg, p))
			if err != nil {
				fmt.Fprintf(stderr, "%s: pools.%s: %v\n", *path, p.Name, err)
				return exitFail
			}
			fmt.Fprintf(stdout, "  pool %s: %s\n", p.Name, line)
			printKeys(stdout, p, "    ")
		}
		return exitOK
	}
	if cfg.Discovery != nil {
		// Nothing is resolved: the ring, and so its version, depend on
		// what the sources answer at run time.
		if len(cfg.Upstreams) > 0 {
			if _, err := ring.New(ringMembers(cfg.Upstreams), ringOptions(cfg)); err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", *path, err)
				return exitFail
			}
		}
		fmt.Fprintf(stdout, "%s (not resolved: the ring version depends on the answers)\n", cfg.Summary())
		printKeys(stdout, &cfg.Pool, "  ")
		return exitOK
	}
	cfg, r, err := loadRing(*path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitFail
	}
	fmt.Fprintf(stdout, "%s, version %s\n", cfg.Summary(), r.Version())
	printKeys(stdout, &cfg.Pool, "  ")
	return exitOK
}

// printKeys writes a line for each of the pool's key sources (or a
// combine's parts) whose key its name does not make plain: what a
// prefix source keys on.
func printKeys(w io.Writer, p *config.Pool, indent string) {
	for i, k := range p.Hash.Key {
		srcs, names := []key.Source{k}, []string{fmt.Sprintf("hash.key[%d]", i)}
		if k.Kind == key.Combine {
			srcs, names = k.Sources, nil
			for j := range k.Sources {
				names = append(names, fmt.Sprintf("hash.key[%d].combine[%d]", i, j))
			}
		}
		for j, s := range srcs {
			if d := s.Describe(p.Hash.BodyLimit); d != "" {
				fmt.Fprintf(w, "%s%s (%s) keys on %s\n", indent, names[j], s, d)
			}
		}
	}
}
