package agentstate

import (
	"context"
	"errors"
	"io"
	"iter"
	"math/rand/v2"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// RetryPolicy says how transient failures are retried.
type RetryPolicy struct {
	MaxAttempts    int           // attempts in total, the first included; 0 (the default): until the deadline
	InitialBackoff time.Duration // default 50ms, doubling up to MaxBackoff
	MaxBackoff     time.Duration // default 1s
}

// DefaultRetry is the policy a Client uses unless told otherwise: calls that are safe to repeat are
// retried until their deadline (DefaultTimeout when the context has none), so they outlive a sidecar
// restart.
var DefaultRetry = RetryPolicy{MaxAttempts: 0, InitialBackoff: 50 * time.Millisecond, MaxBackoff: time.Second}

// DefaultTimeout is the deadline of a call whose context has none, retries included.
const DefaultTimeout = 30 * time.Second

// ResumeFor is how long Watch with MaxAttempts 0 keeps reopening a stream that fails in a row.
const ResumeFor = 60 * time.Second

func (p RetryPolicy) spent(attempts int) bool { return p.MaxAttempts > 0 && attempts >= p.MaxAttempts }

// IsTransient reports whether an error may go away on retry: UNAVAILABLE, RESOURCE_EXHAUSTED
// with reason OVERLOADED, ABORTED with reason CONFLICT.
func IsTransient(err error) bool {
	var e *Error
	if !errors.As(FromError(err), &e) {
		return false
	}
	switch e.Code {
	case codes.Unavailable:
		return true
	case codes.ResourceExhausted:
		return e.Reason == "OVERLOADED"
	case codes.Aborted:
		return e.Reason == "CONFLICT"
	}
	return false
}

func jitter(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

type retryKey struct{}

// WithoutRetry returns a context whose calls are never retried.
func WithoutRetry(ctx context.Context) context.Context {
	return context.WithValue(ctx, retryKey{}, false)
}

// unaryInterceptor gives every unary call a default deadline (when ctx has none), retries the calls
// that are safe to repeat (Rules; a request that needs a request_id gets one unless noRequestIDs) on
// transient errors within that deadline, waiting for the connection to be ready (unless failFast or
// the call says otherwise), and turns errors into *Error.
func unaryInterceptor(timeout time.Duration, policy RetryPolicy, noRequestIDs, failFast bool) grpc.UnaryClientInterceptor {
	newID := newUUID
	if noRequestIDs {
		newID = nil
	}
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := ctx.Deadline(); !ok && timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		req, retry := prepare(method, req, newID)
		if v, ok := ctx.Value(retryKey{}).(bool); ok {
			retry = v
		}
		if retry && !failFast && policy.MaxAttempts != 1 {
			// first, so that a WaitForReady the caller gave wins
			opts = append([]grpc.CallOption{grpc.WaitForReady(true)}, opts...)
		}
		backoff := policy.InitialBackoff
		for attempt := 1; ; attempt++ {
			err := FromError(invoker(ctx, method, req, reply, cc, opts...))
			if err == nil || !retry || policy.spent(attempt) || !IsTransient(err) {
				return err
			}
			wait := jitter(backoff)
			var e *Error
			if errors.As(err, &e) {
				if ms, perr := strconv.Atoi(e.Metadata["retry_after_ms"]); perr == nil && time.Duration(ms)*time.Millisecond > wait {
					wait = time.Duration(ms) * time.Millisecond
				}
			}
			if dl, ok := ctx.Deadline(); ok && time.Now().Add(wait).After(dl) {
				return err
			}
			if sleepCtx(ctx, wait) != nil {
				return err
			}
			backoff = min(backoff*2, policy.MaxBackoff)
		}
	}
}

// streamInterceptor turns stream errors into *Error (streams get no default deadline: watches run until cancelled).
func streamInterceptor() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		s, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			return nil, FromError(err)
		}
		return errorStream{s}, nil
	}
}

type errorStream struct{ grpc.ClientStream }

func (s errorStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == io.EOF {
		return err
	}
	return FromError(err)
}

// Receive iterates a server stream: each item, then a final non-nil error unless the
// stream ended cleanly. Stopping the loop early does not cancel the call: cancel its context.
func Receive[T any](stream grpc.ServerStreamingClient[T]) iter.Seq2[*T, error] {
	return func(yield func(*T, error) bool) {
		for {
			item, err := stream.Recv()
			if err == io.EOF {
				return
			}
			if err != nil {
				yield(nil, FromError(err))
				return
			}
			if !yield(item, nil) {
				return
			}
		}
	}
}

// Watch is a resumable server stream: open(ctx, last) starts the stream after the last
// item seen (nil at first); when it fails with a transient error it is reopened from
// that item with back-off (after policy.MaxAttempts failures in a row, or with MaxAttempts 0
// after ResumeFor of them, the error is yielded). It ends when the server ends the stream,
// ctx is done, the loop stops, or a non-transient error is yielded. This is the shape of WatchEvents
// (resume from a sequence number) and works for any server-streaming method.
func Watch[T any](ctx context.Context, policy RetryPolicy, open func(ctx context.Context, last *T) (grpc.ServerStreamingClient[T], error)) iter.Seq2[*T, error] {
	return func(yield func(*T, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var last *T
		failures := 0
		var failingSince time.Time
		backoff := policy.InitialBackoff
		for {
			stream, err := open(ctx, last)
			if err == nil {
				for {
					var item *T
					item, err = stream.Recv()
					if err != nil {
						break
					}
					last, failures, backoff = item, 0, policy.InitialBackoff
					if !yield(item, nil) {
						return
					}
				}
				if err == io.EOF {
					return
				}
			}
			err = FromError(err)
			if failures == 0 {
				failingSince = time.Now()
			}
			failures++
			spent := policy.spent(failures) || (policy.MaxAttempts <= 0 && time.Since(failingSince) > ResumeFor)
			if ctx.Err() != nil || !IsTransient(err) || spent {
				yield(nil, err)
				return
			}
			if sleepCtx(ctx, jitter(backoff)) != nil {
				yield(nil, err)
				return
			}
			backoff = min(backoff*2, policy.MaxBackoff)
		}
	}
}
