package agentstate

import (
	"bytes"
	"context"
	"reflect"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// setupFacts puts the facts of tests/test_context_memory.py under a fresh root and starts a thread.
func setupFacts(t *testing.T, c *Client) (string, string) {
	t.Helper()
	ctx := context.Background()
	root := "r" + newUUID()[:6]
	facts := []struct {
		key   string
		value map[string]any
		vec   []float32
	}{
		{"tea", map[string]any{"fact": "likes green tea", "kind": "pref", "n": 3}, []float32{1, 0}},
		{"cats", map[string]any{"fact": "has two cats", "kind": "fact", "n": 1}, []float32{0.6, 0.8}},
		{"city", map[string]any{"fact": "lives in Lyon", "kind": "fact", "n": 2}, []float32{0, 1}},
		{"coffee", map[string]any{"fact": "no coffee after noon", "kind": "pref", "n": 5}, []float32{0.9, 0.1}},
	}
	for _, f := range facts {
		if _, err := c.Memory.Put(ctx, []string{root, "u1"}, f.key, f.value, &MemoryPutOptions{Vectors: map[string][]float32{"fact": f.vec}}); err != nil {
			t.Fatal(err)
		}
	}
	th := tid()
	it, err := NewItem(pb.ItemKind_ITEM_KIND_MESSAGE, "what do I like?", &ItemOptions{Role: "user"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.AppendItems(ctx, th, []*pb.ItemInput{it}, &AppendOptions{CreateThread: true}); err != nil {
		t.Fatal(err)
	}
	return root, th
}

type hit struct {
	key   string
	score *float64
	index uint32
}

func hitsOf(ctx *pb.GetContextResponse) []hit {
	var out []hit
	for _, i := range ctx.Items {
		if i.MemoryHit != nil {
			out = append(out, hit{i.MemoryHit.Key, i.MemoryHit.Score, i.GetKnowledgeIndex()})
		}
	}
	return out
}

// TestGetContextMemoryQuery: the hits are the same search's items, in its order, after the given knowledge
// item, named in the explanation; the hash recomputed here equals the server's (as the Python and TS tests).
func TestGetContextMemoryQuery(t *testing.T) {
	c, ctx := newClient(t), context.Background()
	root, th := setupFacts(t, c)
	opts := &MemoryQueryOptions{Filter: map[string]any{"n": map[string]any{"$gte": 2}}, Vector: []float32{1, 0.05}, Limit: 3}
	q, err := NewMemoryQuery([]string{root}, opts)
	if err != nil {
		t.Fatal(err)
	}
	kv, _ := ToValue("a given fact")
	given := []*pb.KnowledgeItem{{Label: "given", Kind: pb.ItemKind_ITEM_KIND_MESSAGE, Content: kv}}
	got, err := c.GetContextWithMemory(ctx, th, 10_000, given, q)
	if err != nil {
		t.Fatal(err)
	}
	want, err := c.Memory.Search(ctx, []string{root}, &MemorySearchOptions{Filter: opts.Filter, Vector: opts.Vector, Limit: 3, NoRefresh: true})
	if err != nil {
		t.Fatal(err)
	}
	hits := hitsOf(got)
	if len(hits) != len(want) {
		t.Fatalf("hits %v, search %v", hits, want)
	}
	var keys []string
	for i, h := range hits {
		keys = append(keys, h.key)
		if h.key != want[i].Item.Key || h.score == nil || *h.score != want[i].GetScore() || h.index != uint32(i+1) {
			t.Fatalf("hit %d: %v %v, search %v", i, h.key, h.score, want[i])
		}
	}
	if !reflect.DeepEqual(keys, []string{"tea", "coffee", "city"}) {
		t.Fatalf("keys %v", keys)
	}
	var explained []string
	for _, e := range got.Explanation {
		if ki, ok := e.Source.(*pb.ExplanationEntry_KnowledgeIndex); ok {
			explained = append(explained, e.GetMemoryHit().GetKey())
			if e.Fate != pb.Fate_FATE_KEPT || got.Items[e.GetContextIndex()].GetKnowledgeIndex() != ki.KnowledgeIndex {
				t.Fatalf("entry %v", e)
			}
		}
	}
	if !reflect.DeepEqual(explained, []string{"", "tea", "coffee", "city"}) {
		t.Fatalf("explanation %v", explained)
	}
	h, err := ContextHash(got.Items)
	if err != nil || !bytes.Equal(h, got.ContextHash) {
		t.Fatalf("context hash %x != %x (%v)", h, got.ContextHash, err)
	}
	// a filter without a vector: the search's order (newest first), no scores; limit 0 means 10
	q2, _ := NewMemoryQuery([]string{root}, &MemoryQueryOptions{Filter: map[string]any{"kind": "fact"}})
	if q2.Limit != 10 {
		t.Fatalf("default limit %d", q2.Limit)
	}
	plain, err := c.GetContextWithMemory(ctx, th, 10_000, nil, q2)
	if err != nil {
		t.Fatal(err)
	}
	ph := hitsOf(plain)
	if len(ph) != 2 || ph[0].key != "city" || ph[1].key != "cats" || ph[0].score != nil || ph[0].index != 0 || ph[1].index != 1 {
		t.Fatalf("plain hits %v", ph)
	}
}

func TestGetContextBadMemoryQueries(t *testing.T) {
	c, ctx := newClient(t), context.Background()
	_, th := setupFacts(t, c)
	cases := []struct {
		prefix        []string
		o             *MemoryQueryOptions
		reason, field string
	}{
		{[]string{"a"}, &MemoryQueryOptions{Limit: 1001}, "INVALID_FIELD", "memory_query.limit"},
		{[]string{"a"}, &MemoryQueryOptions{Filter: map[string]any{"$bad": 1}}, "INVALID_FILTER", "memory_query.filter.expression['$bad']"},
		{[]string{""}, nil, "INVALID_FIELD", "memory_query.path_prefix[0]"},
		{[]string{"a"}, &MemoryQueryOptions{Vector: []float32{1, 0}, VectorSpace: "nowhere"}, "VECTOR_SPACE_NOT_FOUND", "memory_query.vector.space"},
	}
	for _, tc := range cases {
		q, err := NewMemoryQuery(tc.prefix, tc.o)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.GetContextWithMemory(ctx, th, 1000, nil, q)
		code := codes.InvalidArgument
		if tc.reason == "VECTOR_SPACE_NOT_FOUND" {
			code = codes.NotFound
		}
		expectErr(t, err, code, tc.reason, tc.field)
	}
}
