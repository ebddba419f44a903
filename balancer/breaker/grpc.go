package breaker

import (
	"net/http"
	"strconv"
)

// GRPCStatusSet is a set of gRPC status codes (0-31; gRPC defines 0-16),
// breaker.failure_grpc_statuses.
type GRPCStatusSet uint32

func NewGRPCStatusSet(codes []int) GRPCStatusSet {
	var s GRPCStatusSet
	for _, c := range codes {
		if c >= 0 && c < 32 {
			s |= 1 << uint(c)
		}
	}
	return s
}

// The header keys a grpc-status reaches the client's response header map
// under: as a header (a trailers-only response, or a trailer ReverseProxy
// announced before the body) or with http.TrailerPrefix (a trailer it did
// not announce).
const (
	grpcStatusKey        = "Grpc-Status"
	grpcStatusTrailerKey = http.TrailerPrefix + "Grpc-Status"
)

// FailedIn reports whether the response header map h, as written to the
// client, holds a grpc-status in the set. Looked at when the response
// head is written it sees a trailers-only response's status; once the
// body is copied it also sees the trailer, which ReverseProxy adds to the
// same map. It allocates nothing.
func (s GRPCStatusSet) FailedIn(h http.Header) bool {
	if s == 0 {
		return false
	}
	return s.listed(h[grpcStatusKey]) || s.listed(h[grpcStatusTrailerKey])
}

func (s GRPCStatusSet) listed(vs []string) bool {
	for _, v := range vs {
		if c, err := strconv.Atoi(v); err == nil && c >= 0 && c < 32 && s&(1<<uint(c)) != 0 {
			return true
		}
	}
	return false
}
