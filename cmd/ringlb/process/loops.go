package process

import (
	"fmt"
	"log/slog"

	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// LoopWarnings says which static upstreams are ringlb's own proxy
// listener (config.LoopsBack): a request sent there comes back into
// ringlb, which sends it there again. Not an error (nginx and HAProxy
// accept such a config too), but never what was meant.
func LoopWarnings(cfg *config.Config) []string {
	var out []string
	for _, p := range cfg.Serving() {
		field := "upstreams"
		if cfg.Pools != nil {
			field = "pools." + p.Name + ".upstreams"
		}
		for i, u := range p.Upstreams {
			if u.URL != nil && config.LoopsBack(cfg.Listen, u.URL) {
				out = append(out, fmt.Sprintf("%s[%d] (%s): %s is ringlb's own listen address (%s): requests sent there come back into ringlb",
					field, i, u.Name, u.URL, cfg.Listen))
			}
		}
	}
	return out
}

func warnLoops(logger *slog.Logger, cfg *config.Config) {
	for _, w := range LoopWarnings(cfg) {
		logger.Warn("upstream loops back", "problem", w)
	}
}

// warnDiscoveredLoopsLocked logs "upstream loops back" once for each
// discovered member whose URL is ringlb's own proxy listener (the bound
// address, so a listen port of 0 is covered too), when it appears or its
// URL changes: a request sent there comes back into ringlb, which answers
// it 508 (its CDN-Loop entry), so it costs one hop, but it is never what
// was meant. Static upstreams are warnLoops's. Callers hold s.mu.
func (s *server) warnDiscoveredLoopsLocked() {
	seen := map[string]bool{}
	for _, pr := range s.pools {
		static := make(map[string]bool, len(pr.opts.Upstreams))
		for _, u := range pr.opts.Upstreams {
			static[u.Name] = true
		}
		for _, m := range pr.b.Members() {
			if static[m.Name] || m.URL == nil || !config.LoopsBack(s.proxyAddr, m.URL) {
				continue
			}
			id := pr.name + "/" + m.Name
			seen[id] = true
			if s.loopWarned[id] == m.URL.String() {
				continue
			}
			s.loopWarned[id] = m.URL.String()
			s.log.Warn("upstream loops back", "pool", pr.name, "problem", fmt.Sprintf(
				"discovered member %s: %s is ringlb's own listen address (%s): requests sent there come back into ringlb",
				m.Name, m.URL, s.proxyAddr))
		}
	}
	for id := range s.loopWarned {
		if !seen[id] {
			delete(s.loopWarned, id)
		}
	}
}
