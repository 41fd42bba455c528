package agentstate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/big"
	"net"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

func newClient(t *testing.T) *Client {
	t.Helper()
	c, err := Dial(testAddress, &Options{Namespace: "go-" + newUUID()[:8]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func tid() string { return "t-" + newUUID() }

func expectErr(t *testing.T, err error, code codes.Code, reason, field string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want *Error %v %s, got %v", code, reason, err)
	}
	if e.Code != code || e.Reason != reason {
		t.Fatalf("want %v %s, got %v %s (%v)", code, reason, e.Code, e.Reason, e)
	}
	if field != "" && e.Field() != field {
		t.Fatalf("want field %q, got %q", field, e.Field())
	}
	return e
}

func TestThreads(t *testing.T) {
	c, ctx := newClient(t), context.Background()
	id := tid()
	th, err := c.CreateThread(ctx, id, &CreateThreadOptions{Metadata: map[string]any{"owner": "go", "n": 1}})
	if err != nil {
		t.Fatal(err)
	}
	md, _ := DecodeMap(th.Metadata)
	if !reflect.DeepEqual(md, map[string]any{"owner": "go", "n": int64(1)}) {
		t.Fatalf("metadata %v", md)
	}
	_, err = c.CreateThread(ctx, id, nil)
	expectErr(t, err, codes.AlreadyExists, "THREAD_ALREADY_EXISTS", "")
	if !errors.Is(err, ErrAlreadyExists) {
		t.Fatal("errors.Is(ErrAlreadyExists)")
	}
	u, err := c.UpdateThread(ctx, id, &UpdateThreadOptions{SetMetadata: map[string]any{"n": 2}, Etag: th.Etag})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.UpdateThread(ctx, id, &UpdateThreadOptions{SetMetadata: map[string]any{"n": 3}, Etag: th.Etag})
	if e := expectErr(t, err, codes.FailedPrecondition, "ETAG_MISMATCH", ""); e.Metadata["current_etag"] != u.Etag {
		t.Fatalf("current_etag %q", e.Metadata["current_etag"])
	}
	if r, err := c.DeleteThread(ctx, id, nil); err != nil || !r.Deleted {
		t.Fatal(r, err)
	}
	_, err = c.GetThread(ctx, id)
	expectErr(t, err, codes.NotFound, "THREAD_NOT_FOUND", "thread_id")
}

func TestListThreadsPages(t *testing.T) {
	c, ctx := newClient(t), context.Background()
	tag := newUUID()
	var want []string
	for i := 0; i < 7; i++ {
		id := fmt.Sprintf("list-%s-%d", tag, i)
		if _, err := c.CreateThread(ctx, id, &CreateThreadOptions{Metadata: map[string]any{"tag": tag}}); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	var got []string
	for th, err := range c.ListThreads(ctx, &ListThreadsOptions{MetadataFilter: map[string]any{"tag": tag}, PageSize: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, th.ThreadId)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v", got)
	}
}

func TestEveryValueType(t *testing.T) {
	c, ctx := newClient(t), context.Background()
	id := tid()
	big70 := new(big.Int).Lsh(big.NewInt(1), 70)
	u, _ := ParseUUID("12345678-1234-5678-1234-567812345678")
	when := time.Date(2024, 5, 1, 12, 0, 0, 123456789, time.FixedZone("", 19800))
	state := map[string]any{
		"text": "héllo 🌍 世界", "big": big70, "float": 0.1, "whole": 2.0, "bytes": []byte{0, 1, 255},
		"when": when, "naive": DateTime{Micros: 0, Kind: Naive}, "id": u, "price": MustDecimal("1.10"),
		"tags": Set{"b", "a"}, "nested": map[string]any{"list": []any{1, []any{2, map[string]any{"deep": nil}}}},
		"blob": Opaque{Type: "pickle", Data: []byte{0x80, 4}},
	}
	if _, err := c.PutCheckpoint(ctx, id, map[string]any{"state": state}, nil); err != nil {
		t.Fatal(err)
	}
	vals, err := c.GetValues(ctx, id, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	got := vals["state"].(map[string]any)
	if got["text"] != state["text"] || got["big"].(*big.Int).Cmp(big70) != 0 || got["float"] != 0.1 || got["whole"] != 2.0 {
		t.Fatalf("scalars: %v", got)
	}
	if !bytes.Equal(got["bytes"].([]byte), []byte{0, 1, 255}) || got["id"] != u || got["price"].(Decimal).String() != "1.10" {
		t.Fatalf("bytes/uuid/decimal: %v", got)
	}
	if got["when"].(DateTime).String() != "2024-05-01T12:00:00.123456+05:30" || got["naive"].(DateTime).String() != "1970-01-01T00:00:00" {
		t.Fatalf("datetimes: %v %v", got["when"], got["naive"])
	}
	if !reflect.DeepEqual(got["tags"], Set{"a", "b"}) || !reflect.DeepEqual(got["blob"], state["blob"]) {
		t.Fatalf("set/opaque: %v %v", got["tags"], got["blob"])
	}
	if !reflect.DeepEqual(got["nested"], map[string]any{"list": []any{int64(1), []any{int64(2), map[string]any{"deep": nil}}}}) {
		t.Fatalf("nested: %v", got["nested"])
	}
}

func TestDeltasForksListDiff(t *testing.T) {
	c, ctx := newClient(t), context.Background()
	id := tid()
	put := func(cid, parent string, ch map[string]any, md map[string]any, etag *string) (*pb.PutCheckpointResponse, error) {
		return c.PutCheckpoint(ctx, id, ch, &PutOptions{CheckpointID: cid, ParentID: parent, Metadata: md, ExpectedHeadEtag: etag})
	}
	a, err := put("0001", "", map[string]any{"messages": []any{"m0"}, "cfg": map[string]any{"a": 1}}, map[string]any{"step": 0}, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := put("0002", "0001", map[string]any{"messages": Append{Items: []any{"m1"}}, "cfg": SetKeys{Set: map[string]any{"b": 2}, Delete: []string{"a"}}},
		map[string]any{"step": 1}, &a.Checkpoint.Etag)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := put("0003", "0002", map[string]any{"messages": Append{Items: []any{"m2"}}, "cfg": Keep{}}, map[string]any{"step": 2}, nil); err != nil {
		t.Fatal(err)
	}
	one := uint64(1)
	if _, err := put("0004", "0002", map[string]any{"messages": Append{Items: []any{"x2"}, KeepFirst: &one}, "cfg": Keep{}}, map[string]any{"step": 2, "fork": true}, nil); err != nil {
		t.Fatal(err)
	}
	v3, _ := c.GetValues(ctx, id, "0003", nil)
	if !reflect.DeepEqual(v3, map[string]any{"messages": []any{"m0", "m1", "m2"}, "cfg": map[string]any{"b": int64(2)}}) {
		t.Fatalf("0003: %v", v3)
	}
	v4, _ := c.GetValues(ctx, id, "0004", nil)
	if !reflect.DeepEqual(v4["messages"], []any{"m0", "x2"}) {
		t.Fatalf("0004: %v", v4)
	}
	ids := func(o *ListOptions) []string {
		var out []string
		for cp, err := range c.ListCheckpoints(ctx, id, o) {
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, cp.CheckpointId)
		}
		return out
	}
	if got := ids(&ListOptions{PageSize: 1}); !slices.Equal(got, []string{"0004", "0003", "0002", "0001"}) {
		t.Fatalf("all: %v", got)
	}
	if got := ids(&ListOptions{MetadataFilter: map[string]any{"step": 2}}); !slices.Equal(got, []string{"0004", "0003"}) {
		t.Fatalf("step 2: %v", got)
	}
	if got := ids(&ListOptions{Before: "0003", Limit: 1}); !slices.Equal(got, []string{"0002"}) {
		t.Fatalf("before: %v", got)
	}
	changes, err := c.Diff(ctx, id, "", "0002", "0003")
	if err != nil || len(changes) != 1 || changes[0].Channel != "messages" || !changes[0].Appended || changes[0].ToLength != 3 {
		t.Fatalf("diff %v %v", changes, err)
	}
	_, err = put("0005", "0003", map[string]any{"messages": []any{"z"}}, nil, &b.Checkpoint.Etag)
	expectErr(t, err, codes.FailedPrecondition, "ETAG_MISMATCH", "")
	_, err = put("0005", "0003", map[string]any{"messages": Append{Items: []any{"z"}, BaseRoot: make([]byte, 32)}}, nil, nil)
	expectErr(t, err, codes.FailedPrecondition, "BASE_MISMATCH", "")
}

func TestPendingWritesAndBadRequests(t *testing.T) {
	c, ctx := newClient(t), context.Background()
	id := tid()
	if _, err := c.PutCheckpoint(ctx, id, map[string]any{"x": 1}, &PutOptions{CheckpointID: "1"}); err != nil {
		t.Fatal(err)
	}
	w := []Write{{TaskID: "task", Idx: 0, Channel: "messages", Value: map[string]any{"role": "ai"}}, {TaskID: "task", Idx: 1, Channel: "x", Value: 2}}
	if r, err := c.PutWrites(ctx, id, "", "1", w); err != nil || r.Stored != 2 {
		t.Fatal(r, err)
	}
	if r, err := c.PutWrites(ctx, id, "", "1", w); err != nil || r.Kept != 2 {
		t.Fatal(r, err)
	}
	cp, err := c.GetCheckpoint(ctx, id, "1", &GetOptions{IncludePendingWrites: true})
	if err != nil || len(cp.PendingWrites) != 2 || cp.PendingWrites[1].Channel != "x" {
		t.Fatal(cp, err)
	}
	_, err = c.GetCheckpoint(ctx, "", "", nil)
	expectErr(t, err, codes.InvalidArgument, "INVALID_FIELD", "thread_id")
	_, err = c.PutCheckpoint(ctx, tid(), map[string]any{"s": map[string]any{"bad": "\xff"}}, nil)
	expectErr(t, err, codes.InvalidArgument, "UNSUPPORTED_VALUE", "channels['s']['bad']")
	_, err = c.Threads.PutCheckpoint(ctx, &pb.PutCheckpointRequest{Namespace: c.Namespace, ThreadId: tid(), Channels: map[string]*pb.ChannelWrite{
		"x": {Op: &pb.ChannelWrite_Value{Value: &pb.Value{Kind: &pb.Value_Msgpack{Msgpack: []byte{0xd4, 0x09, 0x00}}}}}}})
	expectErr(t, err, codes.InvalidArgument, "UNSUPPORTED_VALUE", "channels['x'].value.msgpack")
}

func TestTCPAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	sc, err := newSidecar()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.cleanup()
	sc.extra = []string{addr}
	if err := sc.start(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tcp, err := Dial(addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	unix, err := Dial(sc.address, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close()
	id := tid()
	if _, err := tcp.PutCheckpoint(ctx, id, map[string]any{"x": "over tcp"}, nil); err != nil {
		t.Fatal(err)
	}
	v, err := unix.GetValues(ctx, id, "", nil)
	if err != nil || v["x"] != "over tcp" {
		t.Fatal(v, err)
	}
}

func TestDeadlineAndRetry(t *testing.T) {
	c, ctx := newClient(t), context.Background()
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	_, err := c.CollectGarbage(short)
	expectErr(t, err, codes.DeadlineExceeded, "", "")

	late, err := newSidecar()
	if err != nil {
		t.Fatal(err)
	}
	defer late.cleanup()
	lc, err := Dial(late.address, &Options{Retry: &RetryPolicy{MaxAttempts: 100, InitialBackoff: 100 * time.Millisecond, MaxBackoff: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	_, err = lc.StoreStats(WithoutRetry(ctx))
	expectErr(t, err, codes.Unavailable, "", "")
	done := make(chan error, 1)
	go func() {
		_, err := lc.StoreStats(ctx)
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	if err := late.spawn(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("retried read failed: %v", err)
	}
}

// Server streams: the generic helpers against grpc.health.v1 Watch (WatchEvents will use the same).
func TestStreamReceiveAndWatch(t *testing.T) {
	sc, err := newSidecar()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.cleanup()
	if err := sc.start(); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(sc.address, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	health := healthpb.NewHealthClient(c.Conn)
	ctx := context.Background()

	// Receive: SERVING, then NOT_SERVING when the server drains, then a typed error or the end.
	stream, err := health.Watch(ctx, &healthpb.HealthCheckRequest{Service: "agentstate.v1.ThreadService"})
	if err != nil {
		t.Fatal(err)
	}
	var seen []healthpb.HealthCheckResponse_ServingStatus
	var last error
	for r, err := range Receive(stream) {
		if err != nil {
			last = err
			break
		}
		seen = append(seen, r.Status)
		if len(seen) == 1 {
			go sc.stop()
		}
	}
	if len(seen) < 2 || seen[0] != healthpb.HealthCheckResponse_SERVING || !slices.Contains(seen, healthpb.HealthCheckResponse_NOT_SERVING) {
		t.Fatalf("statuses %v", seen)
	}
	if last != nil && !errors.Is(last, ErrUnavailable) && !errors.Is(last, ErrCanceled) {
		t.Fatalf("stream ended with %v", last)
	}
	time.Sleep(200 * time.Millisecond)
	sc.stop()

	// Watch: reopened after the server restarts, with the last item seen.
	if err := sc.start(); err != nil {
		t.Fatal(err)
	}
	var opened []*healthpb.HealthCheckResponse
	n := 0
	policy := RetryPolicy{MaxAttempts: 200, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	for r, err := range Watch(ctx, policy, func(ctx context.Context, last *healthpb.HealthCheckResponse) (grpc.ServerStreamingClient[healthpb.HealthCheckResponse], error) {
		opened = append(opened, last)
		return health.Watch(ctx, &healthpb.HealthCheckRequest{Service: "agentstate.v1.ThreadService"})
	}) {
		if err != nil {
			t.Fatal(err)
		}
		n++
		if n == 1 {
			sc.stop()
			if err := sc.spawn(); err != nil {
				t.Fatal(err)
			}
		}
		if len(opened) >= 2 && r.Status == healthpb.HealthCheckResponse_SERVING {
			break
		}
	}
	if opened[0] != nil || len(opened) < 2 || opened[len(opened)-1] == nil {
		t.Fatalf("opened with %v", opened)
	}
}

func TestIdempotent(t *testing.T) {
	etag := "e"
	cases := []struct {
		method string
		req    any
		want   bool
	}{
		{"/agentstate.v1.ThreadService/GetCheckpoint", &pb.GetCheckpointRequest{}, true},
		{"/agentstate.v1.ThreadService/ListThreads", &pb.ListThreadsRequest{}, true},
		{"/agentstate.v1.ThreadService/DeleteThread", &pb.DeleteThreadRequest{}, false},
		{"/agentstate.v1.ThreadService/DeleteThread", &pb.DeleteThreadRequest{RequestId: "r"}, true},
		{"/agentstate.v1.ThreadService/PutWrites", &pb.PutWritesRequest{}, true},
		{"/agentstate.v1.ThreadService/PutCheckpoint", &pb.PutCheckpointRequest{CheckpointId: "c"}, true},
		// an identical re-put is answered before the head etag is checked (the table of docs/clients.md)
		{"/agentstate.v1.ThreadService/PutCheckpoint", &pb.PutCheckpointRequest{CheckpointId: "c", ExpectedHeadEtag: &etag}, true},
		{"/agentstate.v1.ThreadService/PutCheckpoint", &pb.PutCheckpointRequest{}, false},
		// collecting garbage again finds less: idempotent (as the Python client always had it)
		{"/agentstate.v1.AdminService/CollectGarbage", &pb.CollectGarbageRequest{}, true},
	}
	for _, c := range cases {
		if got := idempotent(c.method, c.req); got != c.want {
			t.Errorf("%s %v: %v", c.method, c.req, got)
		}
	}
}
