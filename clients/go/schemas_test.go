package agentstate

import (
	"context"
	"reflect"
	"testing"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// TestSchemas: register three versions, read a version-1 checkpoint at 3 (migrated), migrate it eagerly.
func TestSchemas(t *testing.T) {
	c, ctx := newClient(t), context.Background()
	add, err := AddField([]string{"profile", "tz"}, "UTC")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schemas.Register(ctx, "agent", [][]*pb.MigrationStep{
		{},
		{Rename([]string{"notes"}, "memo"), add, Convert([]string{"profile", "age"}, pb.ValueType_VALUE_TYPE_INT)},
		{MapItems([]string{"messages"}, Rename([]string{"text"}, "content"))},
	}, 0, pb.FailurePolicy_FAILURE_POLICY_FAIL); err != nil {
		t.Fatal(err)
	}
	thread := "go-schema-" + newUUID()
	channels := map[string]*pb.ChannelWrite{}
	for k, v := range map[string]any{"profile": map[string]any{"age": "36"}, "notes": "n",
		"messages": []any{map[string]any{"text": "hi"}}} {
		val, err := ToValue(v)
		if err != nil {
			t.Fatal(err)
		}
		channels[k] = &pb.ChannelWrite{Op: &pb.ChannelWrite_Value{Value: val}}
	}
	if _, err := c.Threads.PutCheckpoint(ctx, &pb.PutCheckpointRequest{Namespace: c.Namespace, ThreadId: thread,
		CheckpointId: "c1", Schema: "agent", SchemaVersion: 1, Channels: channels}); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"profile": map[string]any{"age": int64(36), "tz": "UTC"}, "memo": "n",
		"messages": []any{map[string]any{"content": "hi"}}}
	values := func(cp *pb.Checkpoint) map[string]any {
		out := map[string]any{}
		for k, cv := range cp.Channels {
			v, err := FromValue(cv.GetValue())
			if err != nil {
				t.Fatal(err)
			}
			out[k] = v
		}
		return out
	}
	got, err := c.Threads.GetCheckpoint(ctx, &pb.GetCheckpointRequest{Namespace: c.Namespace, ThreadId: thread,
		ReadSchemaVersion: 3})
	if err != nil {
		t.Fatal(err)
	}
	if cp := got.Checkpoint; !reflect.DeepEqual(values(cp), want) || cp.Migration != pb.MigrationStatus_MIGRATION_STATUS_MIGRATED ||
		cp.SchemaVersion != 3 || cp.StoredSchemaVersion != 1 {
		t.Fatalf("migrated read %v (migration %v, version %d/%d)", values(cp), cp.Migration, cp.SchemaVersion, cp.StoredSchemaVersion)
	}
	calls := 0
	final, err := c.Schemas.MigrateThread(ctx, thread, "agent", 0, func(*pb.MigrationProgress) { calls++ })
	if err != nil || final.CheckpointsMigrated != 1 || calls == 0 {
		t.Fatal(final, err, calls)
	}
	stored, err := c.Threads.GetCheckpoint(ctx, &pb.GetCheckpointRequest{Namespace: c.Namespace, ThreadId: thread})
	if err != nil || !reflect.DeepEqual(values(stored.Checkpoint), want) || stored.Checkpoint.SchemaVersion != 3 {
		t.Fatal(stored, err)
	}
	if s, err := c.Schemas.Get(ctx, "agent"); err != nil || s.LatestVersion != 3 {
		t.Fatal(s, err)
	}
}
