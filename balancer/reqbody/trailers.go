package reqbody

import (
	"net/http"
	"slices"
)

// TrailerGate keeps a request's trailers to those its Trailer header
// declared. When the body ends, net/http's HTTP/1.1 server adds every
// trailer field the client sent to the request's Trailer map, declared
// or not (Host too), and that map is what the transport sends upstream
// after the body: close, called then, removes the fields the Trailer
// header did not declare, and Host always (a trailer never routes). So
// a request's trailers reach the upstream the same whether its key was
// read from the body (which may read it to its end before the request
// is sent) or not, and as HTTP/2 clients' do (net/http's HTTP/2 server
// keeps only declared ones). It allocates only for a request that
// declares trailers.
type TrailerGate struct {
	trailer  *http.Header // the request's Trailer field
	declared []string     // the names declared, canonical
}

// NewTrailerGate is the gate of r, whose body nothing has read yet (so
// its Trailer map holds the declared names only). A declared Host is
// dropped at once, so that the upstream is not told of it either.
func NewTrailerGate(r *http.Request) TrailerGate {
	g := TrailerGate{trailer: &r.Trailer}
	if len(r.Trailer) == 0 {
		return g
	}
	delete(r.Trailer, "Host")
	g.declared = make([]string, 0, len(r.Trailer))
	for k := range r.Trailer {
		g.declared = append(g.declared, k)
	}
	return g
}

// Close removes the undeclared fields from the trailers the server read
// as the body ended. It edits the map in place: the request the
// transport sends may share it.
func (g *TrailerGate) Close() {
	if g.trailer == nil {
		return
	}
	for k := range *g.trailer {
		if !slices.Contains(g.declared, k) {
			delete(*g.trailer, k)
		}
	}
}
