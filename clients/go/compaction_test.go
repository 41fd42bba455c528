package agentstate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// compactionThread is a new thread with a trigger/compact/keep policy (and max summary chars when > 0).
func compactionThread(t *testing.T, c *Client, trig, comp, keep, maxChars uint32) string {
	t.Helper()
	th := tid()
	if _, err := c.AppendItems(context.Background(), th, nil, &AppendOptions{CreateThread: true}); err != nil {
		t.Fatal(err)
	}
	p := &pb.CompactionPolicy{TriggerItems: &trig, CompactItems: &comp, KeepLastItems: &keep}
	if maxChars > 0 {
		p.MaxSummaryChars = &maxChars
	}
	if _, err := c.Conversations.SetCompactionPolicy(context.Background(), &pb.SetCompactionPolicyRequest{
		Namespace: c.Namespace, Scope: pb.ConfigScope_CONFIG_SCOPE_THREAD, ThreadId: th, Policy: p}); err != nil {
		t.Fatal(err)
	}
	return th
}

func appendMessages(t *testing.T, c *Client, th string, texts ...string) {
	t.Helper()
	var items []*pb.ItemInput
	for _, s := range texts {
		items = append(items, mustItem(t, pb.ItemKind_ITEM_KIND_MESSAGE, s, &ItemOptions{Role: "user"}))
	}
	if _, err := c.AppendItems(context.Background(), th, items, nil); err != nil {
		t.Fatal(err)
	}
}

func summaryRows(t *testing.T, c *Client, th string) [][3]string {
	t.Helper()
	resp, err := c.Conversations.ListSummaries(context.Background(), &pb.ListSummariesRequest{Namespace: c.Namespace, ThreadId: th, Level: 1})
	if err != nil {
		t.Fatal(err)
	}
	var out [][3]string
	for _, s := range resp.Summaries {
		out = append(out, [3]string{s.SummaryId, s.Text, s.Producer})
	}
	return out
}

// itemsText is "s:" and the items' string contents joined with commas.
func itemsText(_ context.Context, comp *pb.Compaction) (string, error) {
	var parts []string
	for _, it := range comp.Items {
		v, err := FromValue(it.Content)
		if err != nil {
			return "", err
		}
		parts = append(parts, fmt.Sprint(v))
	}
	return "s:" + strings.Join(parts, ","), nil
}

func TestCompactionWorkerAppliesDueAndRunsUntilCancelled(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	th := compactionThread(t, c, 3, 1, 1, 0)
	appendMessages(t, c, th, "m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7") // L1:1-1 … L1:6-6 due
	held, err := c.ClaimCompaction(ctx, "other", &ClaimOptions{ThreadID: th})
	if err != nil || held == nil || held.Compaction.CompactionId != "L1:1-1" {
		t.Fatalf("claim: %v %v", held, err)
	}
	w := NewCompactionWorker(c, itemsText, "go-helper")
	w.ThreadID = th
	n, err := w.RunOnce(ctx)
	if err != nil || n != 5 || w.Dropped != 0 {
		t.Fatalf("run once: %d %v (dropped %d)", n, err, w.Dropped)
	}
	rows := summaryRows(t, c, th)
	want := [][3]string{{"L1:2-2", "s:m1", "go-helper"}, {"L1:3-3", "s:m2", "go-helper"}, {"L1:4-4", "s:m3", "go-helper"},
		{"L1:5-5", "s:m4", "go-helper"}, {"L1:6-6", "s:m5", "go-helper"}}
	if fmt.Sprint(rows) != fmt.Sprint(want) {
		t.Fatalf("summaries %v, want %v", rows, want)
	}

	runCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var runErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		runErr = w.Run(runCtx, 500*time.Millisecond)
	}()
	appendMessages(t, c, th, "x", "y") // L1:7-7 and L1:8-8 due
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && len(summaryRows(t, c, th)) < 7 {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	if runErr != nil {
		t.Fatalf("run: %v", runErr)
	}
	rows = summaryRows(t, c, th)
	if len(rows) != 7 || rows[5][1] != "s:m6" || rows[6][1] != "s:m7" || w.Applied != 7 {
		t.Fatalf("after run: %v (applied %d)", rows, w.Applied)
	}
}

func TestCompactionWorkerDropsStaleAndLeaseLost(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	th := compactionThread(t, c, 3, 1, 1, 0)
	appendMessages(t, c, th, "a", "b", "c") // L1:1-1 due
	stale := NewCompactionWorker(c, func(ctx context.Context, _ *pb.Compaction) (string, error) {
		// the range goes while the model "thinks": SUMMARY_STALE
		_, err := c.Conversations.ClearItems(ctx, &pb.ClearItemsRequest{Namespace: c.Namespace, ThreadId: th})
		return "late", err
	}, "")
	stale.ThreadID = th
	if n, err := stale.RunOnce(ctx); err != nil || n != 0 || stale.Dropped != 1 {
		t.Fatalf("stale: %d %v (dropped %d)", n, err, stale.Dropped)
	}
	if rows := summaryRows(t, c, th); len(rows) != 0 {
		t.Fatalf("summaries after a stale one: %v", rows)
	}

	appendMessages(t, c, th, "d", "e", "f") // L1:4-4 due
	slow := NewCompactionWorker(c, func(ctx context.Context, comp *pb.Compaction) (string, error) {
		time.Sleep(1300 * time.Millisecond) // longer than the 1 s lease: another worker takes the claim over
		other, err := c.ClaimCompaction(ctx, "other", &ClaimOptions{ThreadID: th})
		if err != nil || other == nil {
			return "", fmt.Errorf("take over: %v %v", other, err)
		}
		if _, err := c.SubmitSummary(ctx, other, "theirs", "other", nil); err != nil {
			return "", err
		}
		return "mine " + comp.CompactionId, nil
	}, "slow")
	slow.ThreadID, slow.Lease = th, time.Second
	if n, err := slow.RunOnce(ctx); err != nil || n != 0 || slow.Dropped != 1 {
		t.Fatalf("lease lost: %d %v (dropped %d)", n, err, slow.Dropped)
	}
	if rows := summaryRows(t, c, th); fmt.Sprint(rows) != fmt.Sprint([][3]string{{"L1:4-4", "theirs", "other"}}) {
		t.Fatalf("summaries: %v", rows)
	}
}

func TestCompactionWorkerCutsTextsAndReturnsErrors(t *testing.T) {
	c := newClient(t)
	ctx := context.Background()
	th := compactionThread(t, c, 3, 1, 1, 16)
	appendMessages(t, c, th, "a", "b", "c", "d") // L1:1-1, L1:2-2 due
	texts := []string{"😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀", ""}
	w := NewCompactionWorker(c, func(context.Context, *pb.Compaction) (string, error) {
		s := texts[0]
		texts = texts[1:]
		return s, nil
	}, "")
	w.ThreadID = th
	if n, err := w.RunOnce(ctx); err != nil || n != 2 {
		t.Fatalf("run once: %d %v", n, err)
	}
	rows := summaryRows(t, c, th)
	if len(rows) != 2 || rows[0][1] != "😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀" || rows[1][1] != "(empty)" || rows[0][2] != "agentstate.CompactionWorker" {
		t.Fatalf("summaries: %v", rows)
	}
	if CutCodePoints("a😀b", 2) != "a😀" || CutCodePoints("ab", 5) != "ab" {
		t.Fatal("CutCodePoints")
	}
	appendMessages(t, c, th, "e") // L1:3-3 due
	boom := errors.New("model down")
	failing := NewCompactionWorker(c, func(context.Context, *pb.Compaction) (string, error) { return "", boom }, "")
	failing.ThreadID = th
	if _, err := failing.RunOnce(ctx); !errors.Is(err, boom) {
		t.Fatalf("want the summariser's error, got %v", err)
	}
}
