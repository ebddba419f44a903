package process

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/ringlb/ringlb/balancer/accesslog"
	"github.com/ringlb/ringlb/cmd/ringlb/config"
)

// newAccessLog builds the access log of a config's access_log block (nil
// when off). A file that cannot be opened is an error naming
// access_log.path.
func newAccessLog(c config.AccessLog, logger *slog.Logger) (*accesslog.Logger, error) {
	if !c.On() {
		return nil, nil
	}
	l, err := accesslog.New(c.Format, c.Path, os.Stdout, logger)
	if err != nil {
		return nil, fmt.Errorf("access_log.path: %w", err)
	}
	return l, nil
}

// reopenLog opens the access log file again (SIGUSR1, after logrotate
// moved it away).
func (s *server) reopenLog() {
	s.mu.Lock()
	l := s.alog
	s.mu.Unlock()
	if l == nil || l.Path() == "" {
		s.log.Info("SIGUSR1: no access log file to reopen")
		return
	}
	if err := l.Reopen(); err != nil {
		s.log.Error("SIGUSR1: cannot reopen the access log; writing on to the old file", "err", err)
		return
	}
	s.log.Info("access log reopened", "path", l.Path())
}
