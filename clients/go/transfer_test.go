package agentstate

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// transferReads is every read of the namespace TestTransfer seeds, as comparable values (thread etags, which
// hold a store's internal key, and the namespace's name left out).
func transferReads(t *testing.T, c *Client) map[string]any {
	t.Helper()
	ctx := context.Background()
	out := map[string]any{}
	var threads []string
	for th, err := range c.ListThreads(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		th.Etag, th.Namespace = "", ""
		b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(th)
		out["thread "+th.ThreadId] = b
		threads = append(threads, th.ThreadId)
	}
	for _, id := range threads {
		var cps [][]byte
		for cp, err := range c.ListCheckpoints(ctx, id, &ListOptions{IncludeValues: true, IncludePendingWrites: true}) {
			if err != nil {
				t.Fatal(err)
			}
			cp.Namespace = ""
			b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(cp)
			cps = append(cps, b)
		}
		out["checkpoints "+id] = cps
	}
	item, err := c.Memory.Get(ctx, []string{"users", "ann"}, "prefs")
	if err == nil && item != nil {
		out["memory"], _ = FromValue(item.Value)
	}
	return out
}

func frames(t *testing.T, data []byte) [][]byte {
	var out [][]byte
	for pos := 0; pos < len(data); {
		if pos+4 > len(data) {
			t.Fatalf("a frame header cut at %d", pos)
		}
		n := int(uint32(data[pos])<<24 | uint32(data[pos+1])<<16 | uint32(data[pos+2])<<8 | uint32(data[pos+3]))
		out = append(out, data[pos+4:pos+4+n])
		pos += 4 + n
	}
	return out
}

// TestTransfer: export a namespace into a buffer and a file (the same file but its header's time), import it
// into a second sidecar (equal reads), check only, conflict, replace, another namespace; refusals write nothing.
func TestTransfer(t *testing.T) {
	a, ctx := newClient(t), context.Background()
	if _, err := a.CreateThread(ctx, "t-b", &CreateThreadOptions{Metadata: map[string]any{"user": "bob", "tier": 1}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutCheckpoint(ctx, "t-a", map[string]any{"messages": []any{"hi"}, "n": 1}, &PutOptions{CheckpointID: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutCheckpoint(ctx, "t-a", map[string]any{"doc": strings.Repeat("x", 70_000)}, &PutOptions{CheckpointID: "c2", ParentID: "c1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutWrites(ctx, "t-a", "", "c2", []Write{{TaskID: "task-1", Channel: "n", Value: 5}}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Memory.Put(ctx, []string{"users", "ann"}, "prefs", map[string]any{"theme": "dark"}, nil); err != nil {
		t.Fatal(err)
	}
	source := transferReads(t, a)
	if len(source["checkpoints t-a"].([][]byte)) != 2 || source["memory"] == nil {
		t.Fatalf("seeded reads %v", source)
	}

	var buf bytes.Buffer
	phases := 0
	summary, err := a.Transfer.ExportNamespace(ctx, "", &buf, &ExportOptions{Progress: func(*pb.TransferProgress) { phases++ }})
	if err != nil {
		t.Fatal(err)
	}
	if summary.Threads != 2 || summary.Bytes != uint64(buf.Len()) || phases == 0 {
		t.Fatalf("summary %v for %d bytes, %d progress messages", summary, buf.Len(), phases)
	}
	if ns, err := FileNamespace(buf.Bytes()); err != nil || ns != a.Namespace {
		t.Fatalf("file namespace %q, %v", ns, err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "a.asx")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	fileSummary, err := a.Transfer.ExportNamespace(ctx, a.Namespace, f, &ExportOptions{ChunkBytes: 4096})
	if cerr := f.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	onDisk, _ := os.ReadFile(path)
	x, y := frames(t, buf.Bytes()), frames(t, onDisk)
	if len(x) != len(y) || len(x) < 5 || uint64(len(onDisk)) != fileSummary.Bytes {
		t.Fatalf("%d and %d frames, %d bytes", len(x), len(y), len(onDisk))
	}
	for i := 1; i < len(x)-1; i++ {
		if !bytes.Equal(x[i], y[i]) {
			t.Fatalf("frame %d differs", i)
		}
	}
	hx, _ := Decode(x[0])
	hy, _ := Decode(y[0])
	mx, my := hx.(map[string]any), hy.(map[string]any)
	if _, ok := mx["created"].(string); !ok {
		t.Fatalf("header %v", mx)
	}
	delete(mx, "created")
	delete(my, "created")
	if !reflect.DeepEqual(mx, my) {
		t.Fatalf("headers differ: %v %v", mx, my)
	}

	b, err := newSidecar()
	if err == nil {
		err = b.start()
	}
	if err != nil {
		t.Fatal(err)
	}
	defer b.cleanup()
	bc, err := Dial(b.address, &Options{Namespace: a.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	defer bc.Close()
	in, _ := os.Open(path)
	checked, err := bc.Transfer.ImportNamespace(ctx, in, &ImportOptions{CheckOnly: true})
	in.Close()
	if err != nil || checked.Threads != 2 {
		t.Fatal(checked, err)
	}
	if got := transferReads(t, bc); len(got) != 0 {
		t.Fatalf("check only wrote %v", got)
	}
	in, _ = os.Open(path)
	var sent []uint64
	r, err := bc.Transfer.ImportNamespace(ctx, in, &ImportOptions{Progress: func(done, size uint64) { sent = append(sent, done, size) }})
	in.Close()
	if err != nil {
		t.Fatal(err)
	}
	if r.Namespace != a.Namespace || r.Threads != 2 || r.Replaced != 0 || r.Bytes != fileSummary.Bytes || r.Blake3 != fileSummary.Blake3 {
		t.Fatalf("import %v", r)
	}
	if n := len(sent); n < 2 || sent[n-2] != uint64(len(onDisk)) || sent[n-1] != uint64(len(onDisk)) {
		t.Fatalf("progress %v", sent)
	}
	if got := transferReads(t, bc); !reflect.DeepEqual(got, source) {
		t.Fatalf("reads after import differ")
	}
	_, err = bc.Transfer.ImportNamespace(ctx, bytes.NewReader(buf.Bytes()), nil)
	expectErr(t, err, codes.AlreadyExists, "IMPORT_THREAD_EXISTS", "")
	again, err := bc.Transfer.ImportNamespace(ctx, bytes.NewReader(buf.Bytes()), &ImportOptions{Replace: true})
	if err != nil || again.Replaced != 2 {
		t.Fatal(again, err)
	}
	if got := transferReads(t, bc); !reflect.DeepEqual(got, source) {
		t.Fatalf("reads after replace differ")
	}
	other := a.Namespace + "-copy"
	if _, err := bc.Transfer.ImportNamespace(ctx, bytes.NewReader(buf.Bytes()), &ImportOptions{Namespace: other}); err != nil {
		t.Fatal(err)
	}
	oc, _ := Dial(b.address, &Options{Namespace: other})
	defer oc.Close()
	if got := transferReads(t, oc); !reflect.DeepEqual(got, source) {
		t.Fatalf("reads of the copy differ")
	}

	// refusals: a damaged file, a file cut short of its announced size, a missing thread, not a file
	bad := append([]byte(nil), buf.Bytes()...)
	bad[len(bad)/2] ^= 1
	badNs := a.Namespace + "-bad"
	_, err = bc.Transfer.ImportNamespace(ctx, bytes.NewReader(bad), &ImportOptions{Namespace: badNs})
	expectErr(t, err, codes.InvalidArgument, "EXPORT_FILE_INVALID", "")
	_, err = bc.Transfer.ImportNamespace(ctx, bytes.NewReader(buf.Bytes()[:buf.Len()/2]),
		&ImportOptions{Namespace: badNs, Size: uint64(buf.Len())})
	expectErr(t, err, codes.InvalidArgument, "EXPORT_FILE_INVALID", "")
	bn, _ := Dial(b.address, &Options{Namespace: badNs})
	defer bn.Close()
	if got := transferReads(t, bn); len(got) != 0 {
		t.Fatalf("a refused import wrote %v", got)
	}
	_, err = a.Transfer.ExportNamespace(ctx, "", &bytes.Buffer{}, &ExportOptions{ThreadID: "no-such-thread"})
	expectErr(t, err, codes.NotFound, "THREAD_NOT_FOUND", "")
	if _, err := bc.Transfer.ImportNamespace(ctx, strings.NewReader("not an export file"), nil); err == nil ||
		!strings.Contains(err.Error(), "not an export file") {
		t.Fatalf("junk: %v", err)
	}
}

// TestResumeThread: under NEW_RUN the read falls back to the newest ancestor that migrates and a run is created
// from it, linked to the chain; a repeated request answers the first response; otherwise no run.
func TestResumeThread(t *testing.T) {
	c, ctx := newClient(t), context.Background()
	put := func(thread, id, parent string, age any, schema string, version uint32) {
		t.Helper()
		v, err := ToValue(age)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Threads.PutCheckpoint(ctx, &pb.PutCheckpointRequest{Namespace: c.Namespace, ThreadId: thread,
			CheckpointId: id, ParentCheckpointId: parent, Schema: schema, SchemaVersion: version,
			Channels: map[string]*pb.ChannelWrite{"age": {Op: &pb.ChannelWrite_Value{Value: v}}}}); err != nil {
			t.Fatal(err)
		}
	}
	toInt := [][]*pb.MigrationStep{{}, {Convert([]string{"age"}, pb.ValueType_VALUE_TYPE_INT)}}
	if _, err := c.Schemas.Register(ctx, "agent", toInt, 0, pb.FailurePolicy_FAILURE_POLICY_NEW_RUN); err != nil {
		t.Fatal(err)
	}
	thread := tid()
	put(thread, "c1", "", "36", "agent", 1)
	put(thread, "c2", "c1", "thirty-six", "agent", 1)
	who, _ := ToValue("worker-2")
	opts := func() *ResumeOptions {
		return &ResumeOptions{RequestID: "r-" + thread, Run: &pb.CreateRunRequest{Claim: true, Metadata: map[string]*pb.Value{"who": who}}}
	}
	got, err := c.ResumeThread(ctx, thread, 2, opts())
	if err != nil {
		t.Fatal(err)
	}
	cp := got.Checkpoint
	if cp.CheckpointId != "c1" || cp.Migration != pb.MigrationStatus_MIGRATION_STATUS_NEW_RUN || cp.UnmigratableCheckpointId != "c2" {
		t.Fatalf("checkpoint %s migration %v unmigratable %s", cp.CheckpointId, cp.Migration, cp.UnmigratableCheckpointId)
	}
	run := got.Run.GetRun()
	meta, err := DecodeMap(run.GetMetadata())
	if err != nil {
		t.Fatal(err)
	}
	if run.StartCheckpointId != "c1" || run.ThreadId != thread || meta["new_run_from"] != "c2" || meta["schema"] != "agent" ||
		meta["who"] != "worker-2" || got.Held == nil || got.Held.RunID() != run.RunId {
		t.Fatalf("run %v metadata %v held %v", run, meta, got.Held)
	}
	again, err := c.ResumeThread(ctx, thread, 2, opts())
	if err != nil || again.Run.GetRun().GetRunId() != run.RunId || again.Run.GetLease().GetLeaseId() != got.Run.GetLease().GetLeaseId() {
		t.Fatal(again, err)
	}
	runs, err := c.Runs.ListRuns(ctx, &pb.ListRunsRequest{Namespace: c.Namespace, ThreadId: thread})
	if err != nil || len(runs.Runs) != 1 {
		t.Fatal(runs, err)
	}
	if _, err := got.Held.Complete(ctx, nil); err != nil {
		t.Fatal(err)
	}

	good := tid()
	put(good, "g1", "", 36, "agent", 2)
	cur, err := c.ResumeThread(ctx, good, 2, nil)
	if err != nil || cur.Checkpoint.Migration != pb.MigrationStatus_MIGRATION_STATUS_CURRENT || cur.Run != nil || cur.Held != nil {
		t.Fatal(cur, err)
	}
	if _, err := c.Schemas.Register(ctx, "strict", toInt, 0, pb.FailurePolicy_FAILURE_POLICY_FAIL); err != nil {
		t.Fatal(err)
	}
	strict := tid()
	put(strict, "c1", "", "x", "strict", 1)
	_, err = c.ResumeThread(ctx, strict, 2, nil)
	expectErr(t, err, codes.FailedPrecondition, "SCHEMA_MIGRATION_FAILED", "")
	for _, th := range []string{good, strict} {
		runs, err := c.Runs.ListRuns(ctx, &pb.ListRunsRequest{Namespace: c.Namespace, ThreadId: th})
		if err != nil || len(runs.Runs) != 0 {
			t.Fatal(th, runs, err)
		}
	}
}
