// Package session is a small stateful gRPC service for trying ringlb's
// affinity with gRPC: each server counts the calls it has seen per session,
// so a client whose calls all land on one server sees its count climb
// 1, 2, 3, ... and a client split across servers does not.
//
// The session is the x-session metadata entry, which reaches ringlb as the
// HTTP/2 header x-session; a config hashing on `header: X-Session` keeps
// every call of a session on one server.
//
// The service is defined by hand (a grpc.ServiceDesc) and its messages
// travel as JSON through a codec registered under the content subtype
// "json", so neither protoc nor generated code is needed:
//
//	service Session {
//	  rpc Hit(HitRequest) returns (Hit);                 // one call, one count
//	  rpc Watch(WatchRequest) returns (stream Hit);      // Count counts, one message each
//	}
package session

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// MetadataKey is the metadata entry naming the session.
const MetadataKey = "x-session"

// ServiceName is the full gRPC service name; method paths are
// /ringlb.example.Session/Hit and /ringlb.example.Session/Watch.
const ServiceName = "ringlb.example.Session"

// HitRequest asks for one count.
type HitRequest struct{}

// WatchRequest asks for Count counts, one message each, Interval apart.
type WatchRequest struct {
	Count    int           `json:"count"`
	Interval time.Duration `json:"interval"`
}

// Hit is one count of a session on one server.
type Hit struct {
	Server  string `json:"server"`  // the answering server's name
	Session string `json:"session"` // the x-session metadata entry
	Count   int    `json:"count"`   // calls (stream messages included) this server has seen for the session
}

// Codec marshals messages as JSON. It is registered under its Name, so a
// client asks for it with grpc.CallContentSubtype(session.CodecName) (the
// client options in this package do) and the server picks it from the
// request's content-type, application/grpc+json.
type Codec struct{}

// CodecName is the content subtype of Codec.
const CodecName = "json"

func (Codec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (Codec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }
func (Codec) Name() string                       { return CodecName }

func init() { encoding.RegisterCodec(Codec{}) }

// CallOptions are what a client passes to every call: the JSON codec.
func CallOptions() []grpc.CallOption {
	return []grpc.CallOption{grpc.CallContentSubtype(CodecName)}
}

// Server counts hits per session.
type Server struct {
	// Name is reported in every Hit.
	Name string
	// Unavailable makes every call fail with UNAVAILABLE (14), as a server
	// that is shutting down or overloaded answers.
	Unavailable bool

	mu     sync.Mutex
	counts map[string]int
}

func (s *Server) next(ctx context.Context) (Hit, error) {
	if s.Unavailable {
		return Hit{}, status.Errorf(codes.Unavailable, "%s is unavailable", s.Name)
	}
	md, _ := metadata.FromIncomingContext(ctx)
	var key string
	if v := md.Get(MetadataKey); len(v) > 0 {
		key = v[0]
	}
	if key == "" {
		return Hit{}, status.Errorf(codes.InvalidArgument, "no %s metadata", MetadataKey)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.counts == nil {
		s.counts = map[string]int{}
	}
	s.counts[key]++
	return Hit{Server: s.Name, Session: key, Count: s.counts[key]}, nil
}

// Hit counts one call.
func (s *Server) Hit(ctx context.Context, _ *HitRequest) (*Hit, error) {
	h, err := s.next(ctx)
	if err != nil {
		return nil, err
	}
	return &h, nil
}

// Watch counts req.Count times, sending a Hit for each.
func (s *Server) Watch(req *WatchRequest, stream grpc.ServerStream) error {
	for i := 0; i < req.Count; i++ {
		if i > 0 && req.Interval > 0 {
			select {
			case <-time.After(req.Interval):
			case <-stream.Context().Done():
				return stream.Context().Err()
			}
		}
		h, err := s.next(stream.Context())
		if err != nil {
			return err
		}
		if err := stream.SendMsg(&h); err != nil {
			return err
		}
	}
	return nil
}

// sessionServer is what ServiceDesc dispatches to.
type sessionServer interface {
	Hit(context.Context, *HitRequest) (*Hit, error)
	Watch(*WatchRequest, grpc.ServerStream) error
}

// ServiceDesc describes the service for grpc.Server.RegisterService:
//
//	srv.RegisterService(&session.ServiceDesc, &session.Server{Name: "grpc-1"})
var ServiceDesc = grpc.ServiceDesc{
	ServiceName: ServiceName,
	HandlerType: (*sessionServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Hit",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(HitRequest)
			if err := dec(in); err != nil {
				return nil, err
			}
			if icpt == nil {
				return srv.(sessionServer).Hit(ctx, in)
			}
			info := &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + ServiceName + "/Hit"}
			return icpt(ctx, in, info, func(ctx context.Context, req any) (any, error) {
				return srv.(sessionServer).Hit(ctx, req.(*HitRequest))
			})
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Watch",
		ServerStreams: true,
		Handler: func(srv any, stream grpc.ServerStream) error {
			in := new(WatchRequest)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			return srv.(sessionServer).Watch(in, stream)
		},
	}},
}

// Client calls the service over a connection.
type Client struct{ cc grpc.ClientConnInterface }

// NewClient wraps a connection (from grpc.NewClient).
func NewClient(cc grpc.ClientConnInterface) *Client { return &Client{cc} }

// withSession adds the session to the outgoing metadata.
func withSession(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, MetadataKey, key)
}

// Hit makes one unary call for session key.
func (c *Client) Hit(ctx context.Context, key string, opts ...grpc.CallOption) (*Hit, error) {
	out := new(Hit)
	err := c.cc.Invoke(withSession(ctx, key), "/"+ServiceName+"/Hit", &HitRequest{}, out, append(CallOptions(), opts...)...)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Watch opens a server stream for session key and calls each with every
// Hit as it arrives; it returns the stream's final status (nil for OK).
func (c *Client) Watch(ctx context.Context, key string, req *WatchRequest, each func(*Hit), opts ...grpc.CallOption) error {
	desc := &ServiceDesc.Streams[0]
	st, err := c.cc.NewStream(withSession(ctx, key), desc, "/"+ServiceName+"/Watch", append(CallOptions(), opts...)...)
	if err != nil {
		return err
	}
	if err := st.SendMsg(req); err != nil {
		return err
	}
	if err := st.CloseSend(); err != nil {
		return err
	}
	for {
		h := new(Hit)
		err := st.RecvMsg(h)
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		each(h)
	}
}
