package agentstate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// HeldRun is a claimed run (Client.StartRun, Client.ClaimRun): its lease, heartbeats and the calls
// that carry its run id and lease id.
//
// A sidecar restart does not lose a held run: the restarted sidecar gives running leases one more
// lease timeout, so KeepAlive treats UNAVAILABLE and DEADLINE_EXCEEDED (any failure the server did
// not decide) as transient and keeps trying until the lease itself would have expired. It reports
// the run lost (Lost, Done) only when it is: the server says so (RUN_NOT_ACTIVE, LEASE_LOST for a
// newer holder, RUN_NOT_FOUND), or no renewal got through for a whole lease timeout
// (*LeaseExpiredError; counted on this process's clock from when the last heartbeat's or the claim's
// answer came: the sidecar renewed the lease just before it sent that answer, whereas a heartbeat
// that waited through a restart was sent long before). Stop working on a run that is lost: the
// sidecar will give it to another holder.
type HeldRun struct {
	c     *Client
	Lease *pb.Lease

	mu         sync.Mutex
	run        *pb.Run
	leaseUntil time.Time
	lost       error
	stopKeep   context.CancelFunc
	done       chan struct{}
}

// runGone are the ErrorInfo reasons after which a heartbeat will never succeed: the run is lost.
var runGone = map[string]bool{"RUN_NOT_ACTIVE": true, "LEASE_LOST": true, "RUN_NOT_FOUND": true}

// heartbeatPause is the pause between heartbeat attempts after a failure the call itself does not retry.
const heartbeatPause = 100 * time.Millisecond

// LeaseExpiredError says a held run's lease ran out on the holder's clock before a heartbeat got
// through (the sidecar was unreachable for a whole lease timeout): the run is lost to this holder.
// Made by the client, not sent by the server; errors.Is(err, ErrDeadlineExceeded) holds, and
// errors.Unwrap gives the last failure.
type LeaseExpiredError struct {
	RunID string
	Lease time.Duration
	Last  error
}

func (e *LeaseExpiredError) Error() string {
	return fmt.Sprintf("DEADLINE_EXCEEDED: no heartbeat of run %q got through for its lease timeout of %s: its lease "+
		"has expired, stop working on it (last failure: %v)", e.RunID, e.Lease, e.Last)
}

func (e *LeaseExpiredError) Unwrap() error { return e.Last }

// Is matches ErrDeadlineExceeded.
func (e *LeaseExpiredError) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == codes.DeadlineExceeded && t.Reason == ""
}

func newHeldRun(c *Client, run *pb.Run, lease *pb.Lease) *HeldRun {
	h := &HeldRun{c: c, Lease: lease, run: run}
	h.leaseUntil = time.Now().Add(h.leaseTimeout())
	return h
}

// StartRun creates a run and holds it (CreateRun with claim): at once when it became active, else
// when its turn comes, waiting up to wait (FailedPrecondition RUN_NOT_ACTIVE after that). req's
// Namespace, ThreadId and Claim are set here.
func (c *Client) StartRun(ctx context.Context, threadID string, req *pb.CreateRunRequest, wait time.Duration) (*HeldRun, error) {
	if req == nil {
		req = &pb.CreateRunRequest{}
	}
	req.Namespace, req.ThreadId, req.Claim = c.Namespace, threadID, true
	resp, err := c.Runs.CreateRun(ctx, req)
	if err != nil {
		return nil, err
	}
	if resp.GetLease() != nil {
		return newHeldRun(c, resp.GetRun(), resp.GetLease()), nil
	}
	return c.ClaimRun(ctx, &pb.ClaimRunRequest{RunId: resp.GetRun().GetRunId()}, wait)
}

// ClaimRun claims a run (by run id, or the active run of a thread), waiting up to wait for its turn.
// Without a deadline in ctx the call gets the client's timeout or wait + 10s, whichever is longer.
func (c *Client) ClaimRun(ctx context.Context, req *pb.ClaimRunRequest, wait time.Duration) (*HeldRun, error) {
	req.Namespace = c.Namespace
	if wait > 0 {
		req.WaitTimeout = durationpb.New(wait)
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, max(DefaultTimeout, wait+10*time.Second))
			defer cancel()
		}
	}
	resp, err := c.Runs.ClaimRun(ctx, req)
	if err != nil {
		return nil, err
	}
	return newHeldRun(c, resp.GetRun(), resp.GetLease()), nil
}

// RunID, LeaseID and ThreadID of the held run.
func (h *HeldRun) RunID() string    { return h.Lease.GetRunId() }
func (h *HeldRun) LeaseID() string  { return h.Lease.GetLeaseId() }
func (h *HeldRun) ThreadID() string { return h.Lease.GetThreadId() }

// Run is the run as last seen (claim, heartbeat, completion).
func (h *HeldRun) Run() *pb.Run {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.run
}

func (h *HeldRun) leaseTimeout() time.Duration { return h.Run().GetLeaseTimeout().AsDuration() }

// LeaseRemaining is how long until the lease expires unless renewed, as this process sees it.
func (h *HeldRun) LeaseRemaining() time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	return time.Until(h.leaseUntil)
}

// Heartbeat renews the lease (safe to repeat: retried through a sidecar restart within ctx's deadline).
func (h *HeldRun) Heartbeat(ctx context.Context) (*pb.Run, error) {
	resp, err := h.c.Runs.Heartbeat(ctx, &pb.HeartbeatRequest{Namespace: h.c.Namespace, RunId: h.RunID(), LeaseId: h.LeaseID()})
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.run = resp.GetRun()
	// renewed just before the answer was sent (the call may have waited through a restart before that)
	if until := time.Now().Add(h.run.GetLeaseTimeout().AsDuration()); until.After(h.leaseUntil) {
		h.leaseUntil = until
	}
	return h.run, nil
}

// afterFailedHeartbeat is the error that makes the run lost after a failed heartbeat, or nil: try again.
func (h *HeldRun) afterFailedHeartbeat(err error) error {
	var e *Error
	if !errors.As(err, &e) || runGone[e.Reason] {
		return err
	}
	if h.LeaseRemaining() > 0 {
		return nil
	}
	return &LeaseExpiredError{RunID: h.RunID(), Lease: h.leaseTimeout(), Last: err}
}

// KeepAlive heartbeats every interval in a goroutine until stop is called or the run is lost (see
// the type's doc: a sidecar restart within the lease is ridden out). Complete and Fail stop it.
func (h *HeldRun) KeepAlive(interval time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	h.mu.Lock()
	if h.stopKeep != nil {
		h.stopKeep()
	}
	h.stopKeep, h.done, h.lost = cancel, done, nil
	h.mu.Unlock()
	beat := func() error {
		for ctx.Err() == nil {
			hctx, hcancel := context.WithTimeout(ctx, max(h.LeaseRemaining(), time.Millisecond))
			_, err := h.Heartbeat(hctx)
			hcancel()
			if err == nil || ctx.Err() != nil {
				return nil
			}
			if lost := h.afterFailedHeartbeat(err); lost != nil {
				return lost
			}
			select {
			case <-ctx.Done():
			case <-time.After(min(heartbeatPause, max(h.LeaseRemaining(), 0))):
			}
		}
		return nil
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(interval):
			}
			if lost := beat(); lost != nil {
				h.mu.Lock()
				h.lost = lost
				h.mu.Unlock()
				return
			}
		}
	}()
	return cancel
}

// Lost is why the run is lost to this holder (set by KeepAlive), or nil.
func (h *HeldRun) Lost() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lost
}

// Done is closed when the current KeepAlive ends (stopped or the run lost); nil before KeepAlive.
func (h *HeldRun) Done() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.done
}

func (h *HeldRun) stopKeepAlive() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopKeep != nil {
		h.stopKeep()
	}
}

// BeginEffect begins an effect as this run (safe to repeat: the same holder gets the same token and state).
func (h *HeldRun) BeginEffect(ctx context.Context, idempotencyKey, requestDigest string) (*pb.BeginEffectResponse, error) {
	return h.c.Effects.BeginEffect(ctx, &pb.BeginEffectRequest{Namespace: h.c.Namespace, IdempotencyKey: idempotencyKey,
		RunId: h.RunID(), LeaseId: h.LeaseID(), RequestDigest: requestDigest})
}

// CompleteEffect records an effect's outcome with the token BeginEffect gave (safe to repeat).
func (h *HeldRun) CompleteEffect(ctx context.Context, idempotencyKey, token string, outcome any) (*pb.Effect, error) {
	req := &pb.CompleteEffectRequest{Namespace: h.c.Namespace, IdempotencyKey: idempotencyKey, Token: token}
	if outcome != nil {
		v, err := encodeField(outcome, "outcome")
		if err != nil {
			return nil, err
		}
		req.Outcome = v
	}
	resp, err := h.c.Effects.CompleteEffect(ctx, req)
	return resp.GetEffect(), err
}

// EffectDone is an effect completion to send with PutCheckpoint (PutOptions.Effects).
func EffectDone(idempotencyKey, token string, outcome any) (*pb.EffectCompletion, error) {
	c := &pb.EffectCompletion{IdempotencyKey: idempotencyKey, Token: token}
	if outcome != nil {
		v, err := encodeField(outcome, "outcome")
		if err != nil {
			return nil, err
		}
		c.Outcome = v
	}
	return c, nil
}

// PutCheckpoint puts a checkpoint as this run; o's Steps, Events and Effects commit with it.
func (h *HeldRun) PutCheckpoint(ctx context.Context, channels map[string]any, o *PutOptions) (*pb.PutCheckpointResponse, error) {
	var opts PutOptions
	if o != nil {
		opts = *o
	}
	if opts.CheckpointNs == "" {
		opts.CheckpointNs = h.Lease.GetCheckpointNs()
	}
	opts.RunID, opts.LeaseID = h.RunID(), h.LeaseID()
	return h.c.PutCheckpoint(ctx, h.ThreadID(), channels, &opts)
}

// Complete ends the run as SUCCESS with output (nil: none) and stops KeepAlive.
func (h *HeldRun) Complete(ctx context.Context, output any) (*pb.Run, error) {
	h.stopKeepAlive()
	req := &pb.CompleteRunRequest{Namespace: h.c.Namespace, RunId: h.RunID(), LeaseId: h.LeaseID()}
	if output != nil {
		v, err := encodeField(output, "output")
		if err != nil {
			return nil, err
		}
		req.Output = v
	}
	resp, err := h.c.Runs.CompleteRun(ctx, req)
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.run = resp.GetRun()
	h.mu.Unlock()
	return resp.GetRun(), nil
}

// Fail ends the run as ERROR and stops KeepAlive.
func (h *HeldRun) Fail(ctx context.Context, message string) (*pb.Run, error) {
	h.stopKeepAlive()
	resp, err := h.c.Runs.FailRun(ctx, &pb.FailRunRequest{Namespace: h.c.Namespace, RunId: h.RunID(), LeaseId: h.LeaseID(), Error: message})
	if err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.run = resp.GetRun()
	h.mu.Unlock()
	return resp.GetRun(), nil
}
