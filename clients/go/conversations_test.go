package agentstate

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

func mustItem(t *testing.T, kind pb.ItemKind, content any, o *ItemOptions) *pb.ItemInput {
	t.Helper()
	it, err := NewItem(kind, content, o)
	if err != nil {
		t.Fatal(err)
	}
	return it
}

func TestConversationLog(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	th := tid()
	resp, err := c.AppendItems(ctx, th, []*pb.ItemInput{
		mustItem(t, pb.ItemKind_ITEM_KIND_MESSAGE, "hi", &ItemOptions{Role: "user", ClientItemID: "a"}),
		mustItem(t, pb.ItemKind_ITEM_KIND_MESSAGE, map[string]any{"x": int64(1)}, &ItemOptions{Role: "assistant"}),
	}, &AppendOptions{CreateThread: true})
	if err != nil || resp.LastSeq != 2 {
		t.Fatalf("append: %v %v", resp, err)
	}
	one := uint64(1)
	_, err = c.AppendItems(ctx, th, []*pb.ItemInput{mustItem(t, pb.ItemKind_ITEM_KIND_MESSAGE, "x", nil)},
		&AppendOptions{ExpectedLastSeq: &one})
	expectErr(t, err, codes.FailedPrecondition, "SEQUENCE_MISMATCH", "expected_last_seq")
	again, err := c.AppendItems(ctx, th, []*pb.ItemInput{
		mustItem(t, pb.ItemKind_ITEM_KIND_MESSAGE, "hi", &ItemOptions{Role: "user", ClientItemID: "a"})}, nil)
	if err != nil || again.Duplicates != 1 || again.Items[0].Seq != 1 {
		t.Fatalf("retry: %v %v", again, err)
	}
	items, err := c.LatestItems(ctx, th, 1)
	if err != nil || len(items) != 1 || items[0].Seq != 2 {
		t.Fatalf("latest: %v %v", items, err)
	}
	popped, err := c.PopItem(ctx, th)
	if err != nil || popped.Seq != 2 {
		t.Fatalf("pop: %v %v", popped, err)
	}
}

func TestContextAndCompactionHashesEqualTheServers(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	th := tid()
	if _, err := c.AppendItems(ctx, th, nil, &AppendOptions{CreateThread: true}); err != nil {
		t.Fatal(err)
	}
	trig, comp, keep := uint32(4), uint32(2), uint32(1)
	if _, err := c.Conversations.SetCompactionPolicy(ctx, &pb.SetCompactionPolicyRequest{Namespace: c.Namespace,
		Scope: pb.ConfigScope_CONFIG_SCOPE_THREAD, ThreadId: th,
		Policy: &pb.CompactionPolicy{TriggerItems: &trig, CompactItems: &comp, KeepLastItems: &keep}}); err != nil {
		t.Fatal(err)
	}
	_, err := c.AppendItems(ctx, th, []*pb.ItemInput{
		mustItem(t, pb.ItemKind_ITEM_KIND_MESSAGE, "question", &ItemOptions{Role: "user"}),
		mustItem(t, pb.ItemKind_ITEM_KIND_TOOL_CALL, map[string]any{"arguments": "q=1"}, &ItemOptions{CallID: "c1", ToolName: "search"}),
		mustItem(t, pb.ItemKind_ITEM_KIND_TOOL_RESULT, strings.Repeat("result ", 30), &ItemOptions{CallID: "c1"}),
		mustItem(t, pb.ItemKind_ITEM_KIND_MESSAGE, "answer", &ItemOptions{Role: "assistant"}),
		mustItem(t, pb.ItemKind_ITEM_KIND_MESSAGE, "thanks", &ItemOptions{Role: "user"}),
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	claim, err := c.Conversations.ClaimCompaction(ctx, &pb.ClaimCompactionRequest{Namespace: c.Namespace, ThreadId: th, Worker: "go"})
	if err != nil || claim.Compaction == nil {
		t.Fatalf("claim: %v %v", claim, err)
	}
	h, err := CompactionHash(claim.Compaction)
	if err != nil || !bytes.Equal(h, claim.Compaction.ContentHash) {
		t.Fatalf("compaction hash %x != %x (%v)", h, claim.Compaction.ContentHash, err)
	}
	cm := claim.Compaction
	if _, err := c.Conversations.SubmitSummary(ctx, &pb.SubmitSummaryRequest{Namespace: c.Namespace, ThreadId: th,
		CompactionId: cm.CompactionId, LeaseId: claim.LeaseId, Level: cm.Level, FirstSeq: cm.FirstSeq,
		LastSeq: cm.LastSeq, ContentHash: cm.ContentHash, Text: "the user asked", Producer: "go/test"}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetContext(ctx, th, 8000, nil)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := ContextHash(got.Items)
	if err != nil || !bytes.Equal(ch, got.ContextHash) {
		t.Fatalf("context hash %x != %x (%v)", ch, got.ContextHash, err)
	}
	if got.Items[0].Source != pb.ContextSource_CONTEXT_SOURCE_SUMMARY || got.TotalTokens > 8000 {
		t.Fatalf("context: %v", got)
	}
}
