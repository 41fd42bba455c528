package agentstate

// Claims, summaries and the compaction worker loop (docs/conversations.md "The worker loop"): the Go twin
// of Python's agentstate.conversations.CompactionWorker and TypeScript's CompactionWorker.

import (
	"context"
	"errors"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// ClaimOptions are the optional fields of ClaimCompaction.
type ClaimOptions struct {
	ThreadID string        // only this thread's compactions (default: any thread of the namespace)
	Lease    time.Duration // the claim's lease (0: the policy's lease_timeout)
	Wait     time.Duration // wait up to this long for one to become due (0: answer at once)
}

// ClaimCompaction claims the oldest due claimable compaction of the client's namespace (or of one thread)
// with its inputs and a lease; nil (and no error) when none was due within the wait. Without a deadline in
// ctx the call gets the client's timeout or wait + 10s, whichever is longer.
func (c *Client) ClaimCompaction(ctx context.Context, worker string, o *ClaimOptions) (*pb.ClaimCompactionResponse, error) {
	if o == nil {
		o = &ClaimOptions{}
	}
	req := &pb.ClaimCompactionRequest{Namespace: c.Namespace, ThreadId: o.ThreadID, Worker: worker}
	if o.Lease > 0 {
		req.LeaseTimeout = durationpb.New(o.Lease)
	}
	if o.Wait > 0 {
		req.WaitTimeout = durationpb.New(o.Wait)
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, max(DefaultTimeout, o.Wait+10*time.Second))
			defer cancel()
		}
	}
	resp, err := c.Conversations.ClaimCompaction(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.GetCompaction() == nil {
		return nil, nil
	}
	return resp, nil
}

// SubmitSummary submits the summary of a claim: its ids, range and content hash are sent back as the
// claim gave them. A refusal is FAILED_PRECONDITION SUMMARY_STALE, COMPACTION_DONE or LEASE_LOST.
func (c *Client) SubmitSummary(ctx context.Context, claim *pb.ClaimCompactionResponse, text, producer string, tokens *pb.TokenCount) (*pb.SubmitSummaryResponse, error) {
	comp := claim.GetCompaction()
	return c.Conversations.SubmitSummary(ctx, &pb.SubmitSummaryRequest{Namespace: c.Namespace,
		ThreadId: comp.GetThreadId(), CompactionId: comp.GetCompactionId(), LeaseId: claim.GetLeaseId(),
		Level: comp.GetLevel(), FirstSeq: comp.GetFirstSeq(), LastSeq: comp.GetLastSeq(),
		ContentHash: comp.GetContentHash(), Text: text, Producer: producer, Tokens: tokens})
}

// Summarize is the user's model call: the summary text of a claimed compaction.
type Summarize func(ctx context.Context, comp *pb.Compaction) (string, error)

// CompactionWorker is the worker loop around a Summarize: it claims due compactions of the client's
// namespace (or of one thread), asks Summarize and submits the text. A summary refused with
// FAILED_PRECONDITION (SUMMARY_STALE, COMPACTION_DONE, LEASE_LOST) is dropped (Dropped counts them) and
// the loop claims again; a worker killed between claim and submit loses nothing (its lease expires, the
// next claim takes the compaction over). There is no heartbeat: a summary that takes longer than the
// lease needs a longer Lease (up to 1 hour).
//
//	w := agentstate.NewCompactionWorker(client, summarise, "summariser-1")
//	err := w.Run(ctx, 30*time.Second) // until ctx is cancelled
type CompactionWorker struct {
	Client    *Client
	Summarize Summarize
	Worker    string        // the worker name of each claim
	ThreadID  string        // only this thread (default: the namespace)
	Lease     time.Duration // 0: the policy's lease_timeout
	Producer  string        // recorded with each summary (default: Worker)

	Applied, Dropped int // summaries applied / refused and dropped
}

// NewCompactionWorker is a worker named worker ("agentstate.CompactionWorker" when empty).
func NewCompactionWorker(c *Client, summarize Summarize, worker string) *CompactionWorker {
	if worker == "" {
		worker = "agentstate.CompactionWorker"
	}
	return &CompactionWorker{Client: c, Summarize: summarize, Worker: worker}
}

// CutCodePoints is the first max Unicode code points of s (max_summary_chars counts code points).
func CutCodePoints(s string, max uint32) string {
	n := uint32(0)
	for i := range s {
		if n == max {
			return s[:i]
		}
		n++
	}
	return s
}

// one claims (waiting up to wait) and summarises one compaction; false when nothing was due.
func (w *CompactionWorker) one(ctx context.Context, wait time.Duration) (bool, error) {
	claim, err := w.Client.ClaimCompaction(ctx, w.Worker, &ClaimOptions{ThreadID: w.ThreadID, Lease: w.Lease, Wait: wait})
	if err != nil || claim == nil {
		return false, err
	}
	comp := claim.GetCompaction()
	text, err := w.Summarize(ctx, comp)
	if err != nil {
		return false, err
	}
	if text = CutCodePoints(text, comp.GetMaxSummaryChars()); text == "" {
		text = "(empty)"
	}
	producer := w.Producer
	if producer == "" {
		producer = w.Worker
	}
	if _, err := w.Client.SubmitSummary(ctx, claim, text, producer, nil); err != nil {
		if !errors.Is(err, ErrFailedPrecondition) {
			return false, err
		}
		w.Dropped++ // stale, done or lease lost: drop it, claim again
		return true, nil
	}
	w.Applied++
	return true, nil
}

// RunOnce summarises what is due now (no waiting) and returns how many summaries were applied.
func (w *CompactionWorker) RunOnce(ctx context.Context) (int, error) {
	before := w.Applied
	for {
		more, err := w.one(ctx, 0)
		if err != nil || !more {
			return w.Applied - before, err
		}
	}
}

// Run works until ctx is cancelled (then it returns nil), waiting up to wait per claim (30s when 0).
func (w *CompactionWorker) Run(ctx context.Context, wait time.Duration) error {
	if wait <= 0 {
		wait = 30 * time.Second
	}
	for ctx.Err() == nil {
		if _, err := w.one(ctx, wait); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
	return nil
}
