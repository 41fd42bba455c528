package agentstate

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

func waitFor(t *testing.T, what string, pred func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !pred() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Five follow watches and a write stream on one client (the sidecar's default limit: 3 streams per
// connection): unary calls still go through promptly, the streams deliver, and Close closes their
// connections.
func TestLongStreamsHaveConnectionsOfTheirOwn(t *testing.T) {
	const streams = 5
	c, err := Dial(testAddress, &Options{Namespace: "go-" + newUUID()[:8]})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ids := make([]string, streams)
	for k := range ids {
		ids[k] = tid()
		if _, err := c.CreateThread(ctx, ids[k], nil); err != nil {
			t.Fatal(err)
		}
	}
	got := make([][]uint64, streams)
	var wg sync.WaitGroup
	for k := range ids {
		w, err := c.Events.WatchEvents(ctx, &pb.WatchEventsRequest{Namespace: c.Namespace, ThreadId: ids[k], Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			if r, err := w.Recv(); err == nil {
				got[k] = append(got[k], uint64(r.GetEvent().GetSequence()))
			}
		}(k)
	}
	ws, err := c.Threads.StreamWrites(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := c.StreamConnections(); n != streams+1 {
		t.Fatalf("%d stream connections, want %d", n, streams+1)
	}
	start := time.Now()
	for i := range 5 {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if _, err := c.PutCheckpoint(cctx, ids[0]+"-u", map[string]any{"i": i}, nil); err != nil {
			t.Fatal(err)
		}
		v, err := c.GetValues(cctx, ids[0]+"-u", "", nil)
		cancel()
		if err != nil || fmt.Sprint(v["i"]) != fmt.Sprint(i) {
			t.Fatalf("get: %v %v", v, err)
		}
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Fatalf("unary calls took %v", d)
	}
	put := &pb.PutCheckpointRequest{Namespace: c.Namespace, ThreadId: ids[0] + "-w", CheckpointId: "0001"}
	if err := ws.Send(&pb.StreamWritesRequest{Writes: []*pb.StreamedWrite{{Seq: 1, Op: &pb.StreamedWrite_PutCheckpoint{PutCheckpoint: put}}}}); err != nil {
		t.Fatal(err)
	}
	resp, err := ws.Recv()
	if err != nil || len(resp.GetAcks()) != 1 || resp.GetAcks()[0].GetError() != nil {
		t.Fatalf("write stream: %v %v", resp, err)
	}
	for _, id := range ids {
		if _, err := c.Events.AppendEvents(ctx, &pb.AppendEventsRequest{Namespace: c.Namespace, ThreadId: id, Events: []*pb.EventInput{{Type: "x"}}}); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	for k := range got {
		if len(got[k]) != 1 || got[k][0] != 1 {
			t.Fatalf("watch %d got %v", k, got[k])
		}
	}
	// each watch got its event and is still open (its context lives on)
	if n := c.StreamConnections(); n != streams+1 {
		t.Fatalf("%d stream connections, want %d", n, streams+1)
	}
	// a watch without Follow stays on the client's connection
	nf, err := c.Events.WatchEvents(ctx, &pb.WatchEventsRequest{Namespace: c.Namespace, ThreadId: ids[0]})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := nf.Recv(); err != nil {
			break
		}
	}
	if n := c.StreamConnections(); n != streams+1 {
		t.Fatalf("%d stream connections after a watch without follow, want %d", n, streams+1)
	}
	if err := ws.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := ws.Recv(); err == nil {
		t.Fatal("the write stream should end after CloseSend")
	}
	waitFor(t, "the write stream's connection to close", func() bool { return c.StreamConnections() == streams })
	c.Close()
	if n := c.StreamConnections(); n != 0 {
		t.Fatalf("%d stream connections after Close", n)
	}
	if _, err := c.Events.WatchEvents(ctx, &pb.WatchEventsRequest{ThreadId: ids[0], Follow: true}); err == nil {
		t.Fatal("a follow watch on a closed client should fail")
	}
}
