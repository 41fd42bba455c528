package agentstate

import (
	"context"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// TestMemory: the same items, filters and orders as the Python and TypeScript memory tests.
func TestMemory(t *testing.T) {
	c, ctx := newClient(t), context.Background()
	items := []struct {
		key   string
		value map[string]any
	}{
		{"i1", map[string]any{"n": 1, "s": "apple", "nested": map[string]any{"k": 1}}},
		{"i10", map[string]any{"n": 10, "s": "banana", "nested": map[string]any{"k": 2}}},
		{"f2", map[string]any{"n": 2.5, "s": "cherry", "nested": map[string]any{"k": 1}}},
		{"s3", map[string]any{"n": "3", "s": "Date"}},
		{"empty", map[string]any{}},
	}
	for _, it := range items {
		vec := []float32{float32(len(it.key)), 1}
		if _, err := c.Memory.Put(ctx, []string{"probe", "a"}, it.key, it.value, &MemoryPutOptions{Vectors: map[string][]float32{"t": vec}}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.Memory.Get(ctx, []string{"probe", "a"}, "i1")
	if err != nil || got == nil || got.Version != 1 {
		t.Fatal(got, err)
	}
	v, _ := MemoryValue(got)
	if !reflect.DeepEqual(v, map[string]any{"n": int64(1), "s": "apple", "nested": map[string]any{"k": int64(1)}}) {
		t.Fatalf("value %#v", v)
	}
	keys := func(filter any, order pb.MemoryOrder) []string {
		t.Helper()
		hits, err := c.Memory.Search(ctx, []string{"probe"}, &MemorySearchOptions{Filter: filter, Order: order, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		out := []string{}
		for _, h := range hits {
			out = append(out, h.Item.Key)
		}
		return out
	}
	pk := pb.MemoryOrder_MEMORY_ORDER_PATH_KEY
	for _, tc := range []struct {
		filter map[string]any
		want   []string
	}{
		{map[string]any{"nested.k": 1}, []string{"f2", "i1"}},
		{map[string]any{"n": map[string]any{"$gt": 2}}, []string{"f2", "i10"}},
		{map[string]any{"n": map[string]any{"$ne": 1}}, []string{"empty", "f2", "i10", "s3"}},
		{map[string]any{"$or": []any{map[string]any{"n": 1}, map[string]any{"s": "Date"}}}, []string{"i1", "s3"}},
		{map[string]any{"n": map[string]any{"$in": []any{1, 10}}}, []string{"i1", "i10"}},
	} {
		if got := keys(tc.filter, pk); !reflect.DeepEqual(got, tc.want) {
			t.Fatalf("%v: got %v, want %v", tc.filter, got, tc.want)
		}
	}
	if got := keys(nil, pb.MemoryOrder_MEMORY_ORDER_INSERTION); !reflect.DeepEqual(got, []string{"i1", "i10", "f2", "s3", "empty"}) {
		t.Fatal(got)
	}
	ties, err := c.Memory.Search(ctx, []string{"probe"}, &MemorySearchOptions{Vector: []float32{2, 1}, Limit: 3,
		Order: pb.MemoryOrder_MEMORY_ORDER_INSERTION})
	if err != nil || len(ties) != 3 || ties[0].Item.Key != "i1" || ties[1].Item.Key != "f2" || ties[2].Item.Key != "s3" {
		t.Fatal(ties, err)
	}
	paths, err := c.Memory.ListNamespaces(ctx, []string{"*"}, nil, 1)
	if err != nil || !reflect.DeepEqual(paths, [][]string{{"probe"}}) {
		t.Fatal(paths, err)
	}
	if _, err := c.Memory.Delete(ctx, []string{"probe", "a"}, "i1", false); err != nil {
		t.Fatal(err)
	}
	revs, err := c.Memory.History(ctx, []string{"probe", "a"}, "i1", true)
	if err != nil || len(revs) != 2 || revs[0].Kind != pb.RevisionKind_REVISION_KIND_DELETE {
		t.Fatal(revs, err)
	}
	_, err = c.Memory.Put(ctx, []string{""}, "k", map[string]any{}, nil)
	expectErr(t, err, codes.InvalidArgument, "INVALID_FIELD", "path[0]")
	_, err = c.Memory.Search(ctx, nil, &MemorySearchOptions{Filter: map[string]any{"n": map[string]any{"$regex": "x"}}})
	expectErr(t, err, codes.InvalidArgument, "INVALID_FILTER", "")
	_, err = c.Memory.GetMemoryItem(ctx, &pb.GetMemoryItemRequest{Namespace: c.Namespace, Path: []string{"p"}, Key: "none"})
	expectErr(t, err, codes.NotFound, "MEMORY_ITEM_NOT_FOUND", "")
}
