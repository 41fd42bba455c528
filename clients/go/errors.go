package agentstate

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is a failed call: the gRPC status code, the agentstate ErrorReason name and
// the ErrorInfo metadata ("field", "limit", "current_etag", "retry_after_ms", ...).
//
//	var e *agentstate.Error
//	if errors.As(err, &e) && e.Reason == "ETAG_MISMATCH" { ... }
//	if errors.Is(err, agentstate.ErrNotFound) { ... }
type Error struct {
	Code     codes.Code
	Message  string
	Reason   string
	Metadata map[string]string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("%s: %s", codeName(e.Code), e.Message)
	if e.Reason != "" {
		s += " [" + e.Reason + "]"
	}
	return s
}

// Field is the request field (or value path) at fault, when the server named one.
func (e *Error) Field() string { return e.Metadata["field"] }

// GRPCStatus lets status.FromError and status.Code see the original code.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// Is matches sentinel errors by code (and by reason when the sentinel has one).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Code == e.Code && (t.Reason == "" || t.Reason == e.Reason)
}

// Sentinels for errors.Is (matched by code).
var (
	ErrInvalidArgument    = &Error{Code: codes.InvalidArgument}
	ErrNotFound           = &Error{Code: codes.NotFound}
	ErrAlreadyExists      = &Error{Code: codes.AlreadyExists}
	ErrFailedPrecondition = &Error{Code: codes.FailedPrecondition}
	ErrResourceExhausted  = &Error{Code: codes.ResourceExhausted}
	ErrAborted            = &Error{Code: codes.Aborted}
	ErrUnavailable        = &Error{Code: codes.Unavailable}
	ErrDeadlineExceeded   = &Error{Code: codes.DeadlineExceeded}
	ErrCanceled           = &Error{Code: codes.Canceled}
	ErrInternal           = &Error{Code: codes.Internal}
	ErrUnauthenticated    = &Error{Code: codes.Unauthenticated}
	ErrPermissionDenied   = &Error{Code: codes.PermissionDenied}
)

// codeName is the canonical upper-case name of a code ("NOT_FOUND"), as in the other clients.
func codeName(c codes.Code) string {
	names := map[codes.Code]string{
		codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN", codes.InvalidArgument: "INVALID_ARGUMENT",
		codes.DeadlineExceeded: "DEADLINE_EXCEEDED", codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
		codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
		codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED", codes.OutOfRange: "OUT_OF_RANGE",
		codes.Unimplemented: "UNIMPLEMENTED", codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE",
		codes.DataLoss: "DATA_LOSS", codes.Unauthenticated: "UNAUTHENTICATED",
	}
	if n, ok := names[c]; ok {
		return n
	}
	return c.String()
}

// CodeName is the upper-case name of the error's code ("NOT_FOUND").
func (e *Error) CodeName() string { return codeName(e.Code) }

// FromError turns a gRPC error into an *Error (nil stays nil; an *Error is returned as is).
func FromError(err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	out := &Error{Code: st.Code(), Message: st.Message(), Metadata: map[string]string{}}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			out.Reason = info.Reason
			for k, v := range info.Metadata {
				out.Metadata[k] = v
			}
		}
	}
	return out
}

// invalidValue is the client-side twin of the server's INVALID_ARGUMENT / UNSUPPORTED_VALUE.
func invalidValue(field string, err error) error {
	var u *UnsupportedValueError
	if !errors.As(err, &u) {
		return err
	}
	path := field + u.Path[1:]
	return &Error{Code: codes.InvalidArgument, Message: path + ": " + u.Reason, Reason: "UNSUPPORTED_VALUE",
		Metadata: map[string]string{"field": path}}
}
