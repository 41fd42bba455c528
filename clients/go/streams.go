package agentstate

import (
	"context"
	"errors"
	"sync"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
	"google.golang.org/grpc"
)

// The sidecar lets one connection have a few streams at once (--max-streams-per-connection, default
// 3; more wait in the client), so a stream that can stay open indefinitely (WatchEvents with Follow,
// StreamWrites) must not take a slot of the connection every other call goes on. Client.Events and
// Client.Threads open those two on a grpc.ClientConn of their own (dialled like the client's: address,
// credentials, token, interceptors, options; gRPC-Go never shares connections between ClientConns),
// closed when the stream ends (an error or io.EOF from Recv, or its context done) and by Client.Close.
// The other streams (artifact upload/download, export/import, migrations) end on their own and stay
// on Client.Conn.

type streamConns struct {
	dial   func() (*grpc.ClientConn, error)
	mu     sync.Mutex
	open   map[*grpc.ClientConn]struct{}
	closed bool
}

var errClosed = errors.New("agentstate: the client is closed")

// get dials a connection of its own; release closes it (once).
func (s *streamConns) get() (*grpc.ClientConn, func(), error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, nil, errClosed
	}
	conn, err := s.dial()
	if err != nil {
		return nil, nil, err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		conn.Close()
		return nil, nil, errClosed
	}
	s.open[conn] = struct{}{}
	s.mu.Unlock()
	release := func() {
		s.mu.Lock()
		_, ok := s.open[conn]
		delete(s.open, conn)
		s.mu.Unlock()
		if ok {
			conn.Close()
		}
	}
	return conn, release, nil
}

func (s *streamConns) closeAll() {
	s.mu.Lock()
	s.closed = true
	conns := s.open
	s.open = map[*grpc.ClientConn]struct{}{}
	s.mu.Unlock()
	for c := range conns {
		c.Close()
	}
}

// StreamConnections is how many connections of their own the client's long-lived streams have open now.
func (c *Client) StreamConnections() int {
	c.streams.mu.Lock()
	defer c.streams.mu.Unlock()
	return len(c.streams.open)
}

// onOwn opens a stream with open on a connection of its own; the connection is closed when ctx is
// done, which the returned cancel (called when Recv fails) brings about.
func onOwn[S any](s *streamConns, ctx context.Context, open func(context.Context, *grpc.ClientConn) (S, error)) (S, context.CancelFunc, error) {
	var zero S
	conn, release, err := s.get()
	if err != nil {
		return zero, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	stream, err := open(ctx, conn)
	if err != nil {
		cancel()
		release()
		return zero, nil, err
	}
	go func() {
		<-ctx.Done()
		release()
	}()
	return stream, cancel, nil
}

type ownEvents struct {
	pb.EventServiceClient
	streams *streamConns
}

// WatchEvents with Follow goes on a connection of its own; without, it ends at the log's tail and
// stays on the client's.
func (e ownEvents) WatchEvents(ctx context.Context, in *pb.WatchEventsRequest, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.WatchEventsResponse], error) {
	if !in.GetFollow() {
		return e.EventServiceClient.WatchEvents(ctx, in, opts...)
	}
	s, cancel, err := onOwn(e.streams, ctx, func(ctx context.Context, conn *grpc.ClientConn) (grpc.ServerStreamingClient[pb.WatchEventsResponse], error) {
		return pb.NewEventServiceClient(conn).WatchEvents(ctx, in, opts...)
	})
	if err != nil {
		return nil, err
	}
	return &ownWatch{s, cancel}, nil
}

type ownWatch struct {
	grpc.ServerStreamingClient[pb.WatchEventsResponse]
	cancel context.CancelFunc
}

func (w *ownWatch) Recv() (*pb.WatchEventsResponse, error) {
	m, err := w.ServerStreamingClient.Recv()
	if err != nil {
		w.cancel()
	}
	return m, err
}

type ownThreads struct {
	pb.ThreadServiceClient
	streams *streamConns
}

// StreamWrites goes on a connection of its own.
func (t ownThreads) StreamWrites(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[pb.StreamWritesRequest, pb.StreamWritesResponse], error) {
	s, cancel, err := onOwn(t.streams, ctx, func(ctx context.Context, conn *grpc.ClientConn) (grpc.BidiStreamingClient[pb.StreamWritesRequest, pb.StreamWritesResponse], error) {
		return pb.NewThreadServiceClient(conn).StreamWrites(ctx, opts...)
	})
	if err != nil {
		return nil, err
	}
	return &ownWrites{s, cancel}, nil
}

type ownWrites struct {
	grpc.BidiStreamingClient[pb.StreamWritesRequest, pb.StreamWritesResponse]
	cancel context.CancelFunc
}

func (w *ownWrites) Recv() (*pb.StreamWritesResponse, error) {
	m, err := w.BidiStreamingClient.Recv()
	if err != nil {
		w.cancel()
	}
	return m, err
}
