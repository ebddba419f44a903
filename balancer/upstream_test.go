package balancer

import "github.com/ringlb/ringlb/healthcheck"

// The health checker reports straight into a Balancer.
var _ healthcheck.Reporter = (*Balancer)(nil)
