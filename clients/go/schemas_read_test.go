package agentstate

import (
	"context"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// The typed ReadSchemaVersion settings of the wrappers: a value stored at version 1 of a three-version schema,
// read at 3, comes back migrated; under a FAIL policy every read gives FAILED_PRECONDITION with its reason.

var (
	readV1  = map[string]any{"text": "hi", "tokens": "2"}
	readV3  = map[string]any{"body": map[string]any{"content": "hi", "tokens": int64(2)}, "lang": "en"}
	readBad = map[string]any{"text": "bad", "tokens": "many"}
)

func registerMsg(t *testing.T, c *Client, policy pb.FailurePolicy, minReadable uint32) {
	t.Helper()
	lang, err := AddField([]string{"lang"}, "en")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Schemas.Register(context.Background(), "gomsg", [][]*pb.MigrationStep{
		{},
		{Rename([]string{"text"}, "content"), Convert([]string{"tokens"}, pb.ValueType_VALUE_TYPE_INT)},
		{Nest(nil, []string{"content", "tokens"}, "body"), lang},
	}, minReadable, policy); err != nil {
		t.Fatal(err)
	}
}

func decoded(t *testing.T, v *pb.Value) any {
	t.Helper()
	out, err := FromValue(v)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func checkpointMap(t *testing.T, cp *pb.Checkpoint) map[string]any {
	t.Helper()
	out, err := CheckpointValues(cp)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestReadSchemaVersionOptions(t *testing.T) {
	c, ctx := newClient(t), context.Background()
	registerMsg(t, c, pb.FailurePolicy_FAILURE_POLICY_DEGRADE, 0)
	migrated := pb.MigrationStatus_MIGRATION_STATUS_MIGRATED

	// checkpoints: GetCheckpoint, GetValues, ListCheckpoints, Diff
	thread := "go-read-" + newUUID()
	if _, err := c.PutCheckpoint(ctx, thread, readV1, &PutOptions{CheckpointID: "c1", Schema: "gomsg", SchemaVersion: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutCheckpoint(ctx, thread, readV3, &PutOptions{CheckpointID: "c2", ParentID: "c1", Schema: "gomsg",
		SchemaVersion: 3}); err != nil {
		t.Fatal(err)
	}
	cp, err := c.GetCheckpoint(ctx, thread, "c1", &GetOptions{ReadSchemaVersion: 3})
	if err != nil {
		t.Fatal(err)
	}
	if got := checkpointMap(t, cp); !reflect.DeepEqual(got, readV3) || cp.Migration != migrated || cp.SchemaVersion != 3 ||
		cp.StoredSchemaVersion != 1 {
		t.Fatalf("GetCheckpoint at 3: %v (%v, %d/%d)", got, cp.Migration, cp.SchemaVersion, cp.StoredSchemaVersion)
	}
	if got, err := c.GetValues(ctx, thread, "c1", nil); err != nil || !reflect.DeepEqual(got, readV1) {
		t.Fatalf("as stored: %v %v", got, err)
	}
	var listed []map[string]any
	for cp, err := range c.ListCheckpoints(ctx, thread, &ListOptions{IncludeValues: true, ReadSchemaVersion: 3}) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, checkpointMap(t, cp))
	}
	if !reflect.DeepEqual(listed, []map[string]any{readV3, readV3}) {
		t.Fatalf("ListCheckpoints at 3: %v", listed)
	}
	if ch, err := c.Diff(ctx, thread, "", "c1", "c2"); err != nil || len(ch) == 0 {
		t.Fatalf("a diff as stored differs: %v %v", ch, err)
	}
	if ch, err := c.Diff(ctx, thread, "", "c1", "c2", ReadSchemaVersion(3)); err != nil || len(ch) != 0 {
		t.Fatalf("a diff at 3 is empty: %v %v", ch, err)
	}

	// memory: Get, Search, History
	path := []string{"go-read", newUUID()[:8]}
	if _, err := c.Memory.Put(ctx, path, "k", readV1, &MemoryPutOptions{Schema: "gomsg", SchemaVersion: 1}); err != nil {
		t.Fatal(err)
	}
	it, err := c.Memory.Get(ctx, path, "k", ReadSchemaVersion(3))
	if err != nil || !reflect.DeepEqual(decoded(t, it.Value), readV3) || it.Migration != migrated || it.SchemaVersion != 3 {
		t.Fatalf("Memory.Get at 3: %v %v", it, err)
	}
	if it, err := c.Memory.Get(ctx, path, "k"); err != nil || !reflect.DeepEqual(decoded(t, it.Value), readV1) {
		t.Fatalf("Memory.Get as stored: %v %v", it, err)
	}
	hits, err := c.Memory.Search(ctx, path, &MemorySearchOptions{ReadSchemaVersion: 3})
	if err != nil || len(hits) != 1 || !reflect.DeepEqual(decoded(t, hits[0].Item.Value), readV3) {
		t.Fatalf("Memory.Search at 3: %v %v", hits, err)
	}
	revs, err := c.Memory.History(ctx, path, "k", true, ReadSchemaVersion(3))
	if err != nil || len(revs) != 1 || !reflect.DeepEqual(decoded(t, revs[0].Value), readV3) || revs[0].Migration != migrated {
		t.Fatalf("Memory.History at 3: %v %v", revs, err)
	}

	// conversations: AppendItems' answer, LatestItems, GetItems, GetContext
	conv := "go-read-conv-" + newUUID()
	in, err := NewItem(pb.ItemKind_ITEM_KIND_MESSAGE, readV1, &ItemOptions{Role: "user", ClientItemID: "a", Schema: "gomsg",
		SchemaVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.AppendItems(ctx, conv, []*pb.ItemInput{in}, &AppendOptions{CreateThread: true, ReadSchemaVersion: 3})
	if err != nil {
		t.Fatal(err)
	}
	if x := resp.Items[0]; x.Migration != migrated || x.SchemaVersion != 3 || x.StoredSchemaVersion != 1 || x.Content != nil {
		t.Fatalf("AppendItems' answer at 3: %v", x)
	}
	latest, err := c.LatestItems(ctx, conv, 0, ReadSchemaVersion(3))
	if err != nil || len(latest) != 1 || !reflect.DeepEqual(decoded(t, latest[0].Content), readV3) || latest[0].Migration != migrated {
		t.Fatalf("LatestItems at 3: %v %v", latest, err)
	}
	if plain, err := c.LatestItems(ctx, conv, 0); err != nil || !reflect.DeepEqual(decoded(t, plain[0].Content), readV1) {
		t.Fatalf("LatestItems as stored: %v %v", plain, err)
	}
	got, err := c.GetItems(ctx, conv, nil, []string{"a"}, &GetItemsOptions{ReadSchemaVersion: 2})
	if err != nil || len(got.Items) != 1 ||
		!reflect.DeepEqual(decoded(t, got.Items[0].Content), map[string]any{"content": "hi", "tokens": int64(2)}) {
		t.Fatalf("GetItems at 2: %v %v", got, err)
	}
	cx, err := c.GetContext(ctx, conv, 10_000, nil, ReadSchemaVersion(3))
	if err != nil {
		t.Fatal(err)
	}
	var ctxItems []any
	for _, x := range cx.Items {
		if x.Source == pb.ContextSource_CONTEXT_SOURCE_ITEM {
			ctxItems = append(ctxItems, decoded(t, x.Content))
		}
	}
	if !reflect.DeepEqual(ctxItems, []any{readV3}) {
		t.Fatalf("GetContext at 3: %v", ctxItems)
	}
}

func TestReadSchemaVersionFailPolicy(t *testing.T) {
	c, ctx := newClient(t), context.Background()
	registerMsg(t, c, pb.FailurePolicy_FAILURE_POLICY_FAIL, 0)
	failed := func(what string, err error, reason string) {
		t.Helper()
		if e := expectErr(t, err, codes.FailedPrecondition, reason, ""); e.Metadata["schema"] != "gomsg" {
			t.Fatalf("%s: metadata %v", what, e.Metadata)
		}
	}
	thread := "go-read-fail-" + newUUID()
	if _, err := c.PutCheckpoint(ctx, thread, readBad, &PutOptions{CheckpointID: "b1", Schema: "gomsg", SchemaVersion: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutCheckpoint(ctx, thread, readV3, &PutOptions{CheckpointID: "b2", ParentID: "b1", Schema: "gomsg",
		SchemaVersion: 3}); err != nil {
		t.Fatal(err)
	}
	_, err := c.GetCheckpoint(ctx, thread, "b1", &GetOptions{ReadSchemaVersion: 3})
	failed("GetCheckpoint", err, "SCHEMA_MIGRATION_FAILED")
	var listErr error
	for _, err := range c.ListCheckpoints(ctx, thread, &ListOptions{IncludeValues: true, ReadSchemaVersion: 3}) {
		if err != nil {
			listErr = err
			break
		}
	}
	failed("ListCheckpoints", listErr, "SCHEMA_MIGRATION_FAILED")
	_, err = c.Diff(ctx, thread, "", "b1", "b2", ReadSchemaVersion(3))
	failed("Diff", err, "SCHEMA_MIGRATION_FAILED")

	path := []string{"go-read-fail", newUUID()[:8]}
	if _, err := c.Memory.Put(ctx, path, "k", readBad, &MemoryPutOptions{Schema: "gomsg", SchemaVersion: 1}); err != nil {
		t.Fatal(err)
	}
	_, err = c.Memory.Get(ctx, path, "k", ReadSchemaVersion(3))
	failed("Memory.Get", err, "SCHEMA_MIGRATION_FAILED")
	_, err = c.Memory.Search(ctx, path, &MemorySearchOptions{ReadSchemaVersion: 3})
	failed("Memory.Search", err, "SCHEMA_MIGRATION_FAILED")

	conv := "go-read-fail-conv-" + newUUID()
	bad, err := NewItem(pb.ItemKind_ITEM_KIND_MESSAGE, readBad, &ItemOptions{Role: "user", Schema: "gomsg", SchemaVersion: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendItems(ctx, conv, []*pb.ItemInput{bad}, &AppendOptions{CreateThread: true}); err != nil {
		t.Fatal(err)
	}
	_, err = c.LatestItems(ctx, conv, 0, ReadSchemaVersion(3))
	failed("LatestItems", err, "SCHEMA_MIGRATION_FAILED")
	_, err = c.GetItems(ctx, conv, []uint64{1}, nil, &GetItemsOptions{ReadSchemaVersion: 3})
	failed("GetItems", err, "SCHEMA_MIGRATION_FAILED")
	_, err = c.GetContext(ctx, conv, 10_000, nil, ReadSchemaVersion(3))
	failed("GetContext", err, "SCHEMA_MIGRATION_FAILED")
	_, err = c.AppendItems(ctx, conv, []*pb.ItemInput{bad}, &AppendOptions{ReadSchemaVersion: 3})
	failed("AppendItems", err, "SCHEMA_MIGRATION_FAILED")
	if items, err := c.LatestItems(ctx, conv, 0); err != nil || len(items) != 1 {
		t.Fatalf("the failed append appended nothing: %d items, %v", len(items), err)
	}
	// under the window a version-1 value is unreadable at any version
	registerMsg(t, c, pb.FailurePolicy_FAILURE_POLICY_FAIL, 2)
	_, err = c.Memory.Get(ctx, path, "k", ReadSchemaVersion(3))
	failed("Memory.Get under the window", err, "SCHEMA_VERSION_UNREADABLE")
}
