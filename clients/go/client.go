package agentstate

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"iter"
	"net"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// DefaultAddress is where `make serve` listens by default.
const DefaultAddress = "unix:sidecar-data/sidecar.sock"

const maxMessage = 64 << 20

// Options configure a Client.
type Options struct {
	Namespace    string                           // tenant namespace of every call (default "default")
	Timeout      time.Duration                    // default deadline of a call without one, retries included (default DefaultTimeout, 30s)
	Retry        *RetryPolicy                     // default DefaultRetry (until the deadline)
	NoRequestIDs bool                             // do not fill in request_id on mutating calls (which makes them unretried)
	FailFast     bool                             // calls that may be retried do not wait for the connection to be ready
	Credentials  credentials.TransportCredentials // default plaintext (unix sockets rely on file permissions)
	// Token is a bearer token for a sidecar started with --auth-file, sent as
	// "authorization: Bearer <token>" on every call; only over TLS or a local connection (a unix
	// socket, TCP to a loopback address): Dial refuses it with another plaintext address.
	Token string
	// TLS, when set, connects over TLS with this configuration (RootCAs, Certificates for mutual
	// TLS, ServerName). It takes the place of Credentials.
	TLS         *tls.Config
	DialOptions []grpc.DialOption
}

// Client is a thin client of agentstate.v1. Threads, Admin, Runs, Events, Effects and Artifacts
// are the generated stubs on the same connection (with the client's deadlines, retries and typed
// errors); StartRun and ClaimRun hold a run (HeldRun).
//
// Calls that are safe to repeat (Rules: reads, and writes idempotent by key, lease or token) are
// retried on transient errors (UNAVAILABLE, OVERLOADED, CONFLICT) until their deadline, waiting
// for the connection to be ready, so they ride out a sidecar restart; other mutating calls are
// retried only with a request_id, which the client fills in (a random UUID) unless told otherwise,
// so a retried write is applied once.
type Client struct {
	Conn      *grpc.ClientConn
	Threads   pb.ThreadServiceClient
	Admin     pb.AdminServiceClient
	Runs      pb.RunServiceClient
	Events    pb.EventServiceClient
	Effects   pb.EffectServiceClient
	Artifacts pb.ArtifactServiceClient
	// Conversations is the ConversationService stub (conversations.go has typed helpers).
	Conversations pb.ConversationServiceClient
	Memory        *Memory   // MemoryService: the stub and its helpers (memory.go)
	Schemas       *Schemas  // SchemaService: the stub and its helpers (schemas.go)
	Transfer      *Transfer // TransferService: the stub and its helpers (transfer.go)
	Namespace     string
	Retry         RetryPolicy
	autoRID       bool
	streams       *streamConns
}

// reconnect makes the connection try again soon after the sidecar comes back: gRPC's default waits
// 1s after the first failed connect, then longer and longer, up to 2 minutes, so a client could stay
// away for seconds after a restart that took half of one; at most 250ms between attempts keeps that
// gap short of a lease.
var reconnect = grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 250 * time.Millisecond},
	MinConnectTimeout: 20 * time.Second,
}

// Dial connects to "unix:PATH" or "HOST:PORT" (lazily: the first call connects).
func Dial(address string, opts *Options) (*Client, error) {
	if opts == nil {
		opts = &Options{}
	}
	policy := DefaultRetry
	if opts.Retry != nil {
		policy = *opts.Retry
	}
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = DefaultTimeout
	}
	creds := opts.Credentials
	if opts.TLS != nil {
		creds = credentials.NewTLS(opts.TLS)
	}
	var perRPC []grpc.DialOption
	if opts.Token != "" {
		if creds == nil && !isLocalAddress(address) {
			return nil, fmt.Errorf("agentstate: a token is sent only over TLS or a local connection (unix socket, loopback); %q is neither: set Options.TLS", address)
		}
		perRPC = append(perRPC, grpc.WithPerRPCCredentials(bearer{"Bearer " + opts.Token}))
	}
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	dial := append([]grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
		grpc.WithConnectParams(reconnect),
		grpc.WithChainUnaryInterceptor(unaryInterceptor(timeout, policy, opts.NoRequestIDs, opts.FailFast)),
		grpc.WithChainStreamInterceptor(streamInterceptor()),
	}, append(perRPC, opts.DialOptions...)...)
	conn, err := grpc.NewClient(address, dial...)
	if err != nil {
		return nil, err
	}
	ns := opts.Namespace
	if ns == "" {
		ns = "default"
	}
	streams := &streamConns{dial: func() (*grpc.ClientConn, error) { return grpc.NewClient(address, dial...) },
		open: map[*grpc.ClientConn]struct{}{}}
	return &Client{Conn: conn, streams: streams,
		Threads: ownThreads{pb.NewThreadServiceClient(conn), streams}, Admin: pb.NewAdminServiceClient(conn),
		Runs: pb.NewRunServiceClient(conn), Events: ownEvents{pb.NewEventServiceClient(conn), streams},
		Effects: pb.NewEffectServiceClient(conn), Artifacts: pb.NewArtifactServiceClient(conn),
		Conversations: pb.NewConversationServiceClient(conn),
		Memory:        &Memory{MemoryServiceClient: pb.NewMemoryServiceClient(conn), namespace: ns},
		Schemas:       &Schemas{SchemaServiceClient: pb.NewSchemaServiceClient(conn), namespace: ns},
		Transfer:      &Transfer{TransferServiceClient: pb.NewTransferServiceClient(conn), namespace: ns},
		Namespace:     ns, Retry: policy, autoRID: !opts.NoRequestIDs}, nil
}

// Close closes the connection and the long-lived streams' own (streams.go).
func (c *Client) Close() error {
	if c.streams != nil {
		c.streams.closeAll()
	}
	return c.Conn.Close()
}

func newUUID() string {
	var u UUID
	_, _ = rand.Read(u[:])
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u.String()
}

func (c *Client) rid(given string) string {
	if given == "" && c.autoRID {
		return newUUID()
	}
	return given
}

// ------------------------------------------------------------ threads

// IfExists policies of CreateThread.
const (
	IfExistsError  = pb.IfExists_IF_EXISTS_ERROR
	IfExistsReturn = pb.IfExists_IF_EXISTS_RETURN
	IfExistsMerge  = pb.IfExists_IF_EXISTS_MERGE_METADATA
)

// CreateThreadOptions are the optional fields of CreateThread.
type CreateThreadOptions struct {
	Metadata  map[string]any
	IfExists  pb.IfExists
	RequestID string
}

// CreateThread creates a thread ("" asks the server for a UUID).
func (c *Client) CreateThread(ctx context.Context, threadID string, o *CreateThreadOptions) (*pb.Thread, error) {
	if o == nil {
		o = &CreateThreadOptions{}
	}
	md, err := encodeMap(o.Metadata, "metadata")
	if err != nil {
		return nil, err
	}
	r, err := c.Threads.CreateThread(ctx, &pb.CreateThreadRequest{Namespace: c.Namespace, ThreadId: threadID, Metadata: md,
		IfExists: o.IfExists, RequestId: c.rid(o.RequestID)})
	return r.GetThread(), err
}

// GetThread returns one thread.
func (c *Client) GetThread(ctx context.Context, threadID string) (*pb.Thread, error) {
	r, err := c.Threads.GetThread(ctx, &pb.GetThreadRequest{Namespace: c.Namespace, ThreadId: threadID})
	return r.GetThread(), err
}

// ListThreadsOptions filter and page ListThreads.
type ListThreadsOptions struct {
	MetadataFilter map[string]any
	PageSize       uint32
}

// ListThreads iterates the namespace's threads in id order, fetching pages as needed.
func (c *Client) ListThreads(ctx context.Context, o *ListThreadsOptions) iter.Seq2[*pb.Thread, error] {
	if o == nil {
		o = &ListThreadsOptions{}
	}
	return func(yield func(*pb.Thread, error) bool) {
		filter, err := encodeMap(o.MetadataFilter, "metadata_filter")
		if err != nil {
			yield(nil, err)
			return
		}
		req := &pb.ListThreadsRequest{Namespace: c.Namespace, MetadataFilter: filter, PageSize: o.PageSize}
		for {
			r, err := c.Threads.ListThreads(ctx, req)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, t := range r.Threads {
				if !yield(t, nil) {
					return
				}
			}
			if r.NextPageToken == "" {
				return
			}
			req.PageToken = r.NextPageToken
		}
	}
}

// UpdateThreadOptions are the changes of UpdateThread.
type UpdateThreadOptions struct {
	SetMetadata map[string]any
	RemoveKeys  []string
	Replace     bool
	Etag        string
	RequestID   string
}

// UpdateThread changes a thread's metadata (a stale Etag fails with ETAG_MISMATCH).
func (c *Client) UpdateThread(ctx context.Context, threadID string, o *UpdateThreadOptions) (*pb.Thread, error) {
	if o == nil {
		o = &UpdateThreadOptions{}
	}
	md, err := encodeMap(o.SetMetadata, "set_metadata")
	if err != nil {
		return nil, err
	}
	r, err := c.Threads.UpdateThread(ctx, &pb.UpdateThreadRequest{Namespace: c.Namespace, ThreadId: threadID,
		SetMetadata: md, RemoveMetadataKeys: o.RemoveKeys, ReplaceMetadata: o.Replace, Etag: o.Etag,
		RequestId: c.rid(o.RequestID)})
	return r.GetThread(), err
}

// DeleteThreadOptions are the optional fields of DeleteThread.
type DeleteThreadOptions struct {
	AllowMissing bool
	Etag         string
	RequestID    string
}

// DeleteThread removes a thread and everything it holds.
func (c *Client) DeleteThread(ctx context.Context, threadID string, o *DeleteThreadOptions) (*pb.DeleteThreadResponse, error) {
	if o == nil {
		o = &DeleteThreadOptions{}
	}
	return c.Threads.DeleteThread(ctx, &pb.DeleteThreadRequest{Namespace: c.Namespace, ThreadId: threadID,
		AllowMissing: o.AllowMissing, Etag: o.Etag, RequestId: c.rid(o.RequestID)})
}

// CopyThread copies a thread's whole checkpoint tree to a new id.
func (c *Client) CopyThread(ctx context.Context, source, target string, metadata map[string]any, replaceMetadata bool) (*pb.CopyThreadResponse, error) {
	md, err := encodeMap(metadata, "metadata")
	if err != nil {
		return nil, err
	}
	return c.Threads.CopyThread(ctx, &pb.CopyThreadRequest{Namespace: c.Namespace, SourceThreadId: source,
		TargetThreadId: target, Metadata: md, ReplaceMetadata: replaceMetadata, RequestId: c.rid("")})
}

// ------------------------------------------------------------ checkpoints

// PutOptions are the optional fields of PutCheckpoint.
type PutOptions struct {
	CheckpointID     string
	ParentID         string
	BaseID           string
	CheckpointNs     string
	Metadata         map[string]any
	Extra            any     // nil: none
	ExpectedHeadEtag *string // nil: no check; "": expects no checkpoint yet
	Schema           string  // a registered schema (c.Schemas) the values follow at SchemaVersion
	SchemaVersion    uint32
	RequireThread    bool
	RequestID        string
	// A run's put (HeldRun.PutCheckpoint fills these in): its run id and lease id, and the steps,
	// events and effect completions committed with the checkpoint.
	RunID   string
	LeaseID string
	Steps   []*pb.StepRecord
	Events  []*pb.EventInput
	Effects []*pb.EffectCompletion
}

// PutCheckpoint stores a checkpoint. Channel values are Go values or Append / SetKeys / Keep deltas.
func (c *Client) PutCheckpoint(ctx context.Context, threadID string, channels map[string]any, o *PutOptions) (*pb.PutCheckpointResponse, error) {
	if o == nil {
		o = &PutOptions{}
	}
	// A checkpoint id made here (time-ordered) makes the put idempotent by id: it is retried without
	// a request_id, so the server keeps no request record for it. With the caller's own request_id
	// (which it may resend itself) the server names the checkpoint.
	checkpointID := o.CheckpointID
	if checkpointID == "" && o.RequestID == "" {
		checkpointID = NewID()
	}
	req := &pb.PutCheckpointRequest{Namespace: c.Namespace, ThreadId: threadID, CheckpointNs: o.CheckpointNs,
		CheckpointId: checkpointID, ParentCheckpointId: o.ParentID, BaseCheckpointId: o.BaseID,
		Channels: map[string]*pb.ChannelWrite{}, ExpectedHeadEtag: o.ExpectedHeadEtag, Schema: o.Schema,
		SchemaVersion: o.SchemaVersion,
		RequireThread: o.RequireThread, RequestId: o.RequestID, RunId: o.RunID, LeaseId: o.LeaseID, Steps: o.Steps,
		Events: o.Events, Effects: o.Effects}
	for name, v := range channels {
		w, err := ChannelWrite(v, fmt.Sprintf("channels['%s']", name))
		if err != nil {
			return nil, err
		}
		req.Channels[name] = w
	}
	var err error
	if req.Metadata, err = encodeMap(o.Metadata, "metadata"); err != nil {
		return nil, err
	}
	if o.Extra != nil {
		if req.Extra, err = encodeField(o.Extra, "extra"); err != nil {
			return nil, err
		}
	}
	return c.Threads.PutCheckpoint(ctx, req)
}

// Write is one pending write of a task.
type Write struct {
	TaskID   string
	Idx      int32
	Channel  string
	Value    any
	TaskPath string
	Replace  bool
}

// PutWrites stores pending writes against a checkpoint (idempotent per task id and idx).
func (c *Client) PutWrites(ctx context.Context, threadID, checkpointNs, checkpointID string, writes []Write) (*pb.PutWritesResponse, error) {
	// idempotent per (task id, idx): no request_id (and no request record) needed
	req := &pb.PutWritesRequest{Namespace: c.Namespace, ThreadId: threadID, CheckpointNs: checkpointNs,
		CheckpointId: checkpointID}
	for i, w := range writes {
		v, err := encodeField(w.Value, fmt.Sprintf("writes[%d].value", i))
		if err != nil {
			return nil, err
		}
		req.Writes = append(req.Writes, &pb.PendingWrite{TaskId: w.TaskID, Idx: w.Idx, Channel: w.Channel, Value: v,
			TaskPath: w.TaskPath, Replace: w.Replace})
	}
	return c.Threads.PutWrites(ctx, req)
}

// GetOptions select what GetCheckpoint returns.
type GetOptions struct {
	CheckpointNs         string
	Channels             []string
	OmitValues           bool
	KnownRoots           map[string][]byte
	IncludePendingWrites bool
	// ReadSchemaVersion is the schema version this code understands: values stored under a registered
	// schema at another version come back migrated (Checkpoint.Migration says how; a FAIL policy gives
	// FAILED_PRECONDITION SCHEMA_MIGRATION_FAILED / SCHEMA_VERSION_UNREADABLE). 0: as stored.
	ReadSchemaVersion uint32
}

// GetCheckpoint returns one checkpoint ("" = the latest of the checkpoint namespace).
func (c *Client) GetCheckpoint(ctx context.Context, threadID, checkpointID string, o *GetOptions) (*pb.Checkpoint, error) {
	if o == nil {
		o = &GetOptions{}
	}
	r, err := c.Threads.GetCheckpoint(ctx, &pb.GetCheckpointRequest{Namespace: c.Namespace, ThreadId: threadID,
		CheckpointNs: o.CheckpointNs, CheckpointId: checkpointID, Channels: o.Channels, OmitValues: o.OmitValues,
		KnownRoots: o.KnownRoots, IncludePendingWrites: o.IncludePendingWrites, ReadSchemaVersion: o.ReadSchemaVersion})
	return r.GetCheckpoint(), err
}

// GetValues returns the decoded channel values of a checkpoint (the latest by default).
func (c *Client) GetValues(ctx context.Context, threadID, checkpointID string, o *GetOptions) (map[string]any, error) {
	cp, err := c.GetCheckpoint(ctx, threadID, checkpointID, o)
	if err != nil {
		return nil, err
	}
	return CheckpointValues(cp)
}

// ListOptions filter and page ListCheckpoints.
type ListOptions struct {
	CheckpointNs         *string
	MetadataFilter       map[string]any
	Before               string
	Limit                uint32
	PageSize             uint32
	IncludeValues        bool
	IncludePendingWrites bool
	ReadSchemaVersion    uint32 // with IncludeValues: each checkpoint migrated as GetOptions.ReadSchemaVersion
}

// ListCheckpoints iterates checkpoints newest first, fetching pages as needed.
func (c *Client) ListCheckpoints(ctx context.Context, threadID string, o *ListOptions) iter.Seq2[*pb.Checkpoint, error] {
	if o == nil {
		o = &ListOptions{}
	}
	return func(yield func(*pb.Checkpoint, error) bool) {
		filter, err := encodeMap(o.MetadataFilter, "metadata_filter")
		if err != nil {
			yield(nil, err)
			return
		}
		req := &pb.ListCheckpointsRequest{Namespace: c.Namespace, ThreadId: threadID, CheckpointNs: o.CheckpointNs,
			MetadataFilter: filter, BeforeCheckpointId: o.Before, Limit: o.Limit, PageSize: o.PageSize,
			IncludeValues: o.IncludeValues, IncludePendingWrites: o.IncludePendingWrites,
			ReadSchemaVersion: o.ReadSchemaVersion}
		for {
			r, err := c.Threads.ListCheckpoints(ctx, req)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, cp := range r.Checkpoints {
				if !yield(cp, nil) {
					return
				}
			}
			if r.NextPageToken == "" {
				return
			}
			req = proto.Clone(req).(*pb.ListCheckpointsRequest)
			req.PageToken = r.NextPageToken
		}
	}
}

// PruneOptions choose one prune policy.
type PruneOptions struct {
	KeepLatest   uint32
	OlderThan    time.Time
	DeleteAll    bool
	CheckpointNs *string
}

// Prune deletes old checkpoints of the given threads; it returns how many.
func (c *Client) Prune(ctx context.Context, threadIDs []string, o PruneOptions) (uint64, error) {
	req := &pb.PruneCheckpointsRequest{Namespace: c.Namespace, ThreadIds: threadIDs, CheckpointNs: o.CheckpointNs,
		RequestId: c.rid("")}
	switch {
	case o.KeepLatest > 0:
		req.Policy = &pb.PruneCheckpointsRequest_KeepLatest{KeepLatest: o.KeepLatest}
	case !o.OlderThan.IsZero():
		req.Policy = &pb.PruneCheckpointsRequest_OlderThan{OlderThan: timestamppb.New(o.OlderThan)}
	case o.DeleteAll:
		req.Policy = &pb.PruneCheckpointsRequest_DeleteAll{DeleteAll: true}
	}
	r, err := c.Threads.PruneCheckpoints(ctx, req)
	return r.GetDeletedCheckpoints(), err
}

// DeleteForRuns deletes every checkpoint whose metadata run_id is one of runIDs.
func (c *Client) DeleteForRuns(ctx context.Context, runIDs []string) (uint64, error) {
	r, err := c.Threads.DeleteCheckpointsForRuns(ctx, &pb.DeleteCheckpointsForRunsRequest{Namespace: c.Namespace,
		RunIds: runIDs, RequestId: c.rid("")})
	return r.GetDeletedCheckpoints(), err
}

// Diff tells which channels differ between two checkpoints (ReadSchemaVersion(v): both compared as read
// at version v of their schema).
func (c *Client) Diff(ctx context.Context, threadID, checkpointNs, from, to string, opts ...ReadOption) ([]*pb.ChannelChange, error) {
	r, err := c.Threads.DiffCheckpoints(ctx, &pb.DiffCheckpointsRequest{Namespace: c.Namespace, ThreadId: threadID,
		CheckpointNs: checkpointNs, FromCheckpointId: from, ToCheckpointId: to, ReadSchemaVersion: readVersion(opts)})
	return r.GetChanges(), err
}

// ReadOption is an optional argument of the reads whose other arguments are positional (Diff, LatestItems,
// GetContext, GetContextWithMemory, Memory.Get, Memory.History); the reads with an options struct have
// the same setting as its ReadSchemaVersion field.
type ReadOption func(*readOptions)

type readOptions struct{ readSchemaVersion uint32 }

// ReadSchemaVersion is the schema version this code understands: a value stored under a registered schema
// at another version comes back migrated to v (its Migration field says how; a FAIL policy gives
// FAILED_PRECONDITION SCHEMA_MIGRATION_FAILED / SCHEMA_VERSION_UNREADABLE). 0: as stored.
func ReadSchemaVersion(v uint32) ReadOption {
	return func(o *readOptions) { o.readSchemaVersion = v }
}

func readVersion(opts []ReadOption) uint32 {
	var o readOptions
	for _, f := range opts {
		f(&o)
	}
	return o.readSchemaVersion
}

// ------------------------------------------------------------ admin

// StoreStats counts what the store holds.
func (c *Client) StoreStats(ctx context.Context) (*pb.GetStoreStatsResponse, error) {
	return c.Admin.GetStoreStats(ctx, &pb.GetStoreStatsRequest{})
}

// CollectGarbage runs one garbage collection now.
func (c *Client) CollectGarbage(ctx context.Context) (*pb.CollectGarbageResponse, error) {
	return c.Admin.CollectGarbage(ctx, &pb.CollectGarbageRequest{})
}

// CheckIntegrity reports references to missing blobs.
func (c *Client) CheckIntegrity(ctx context.Context) (*pb.CheckIntegrityResponse, error) {
	return c.Admin.CheckIntegrity(ctx, &pb.CheckIntegrityRequest{})
}

// BackupStore writes an online backup into the sidecar's backup directory,
// named name (empty: backup-<UTC time>, so that a retry makes no second one).
func (c *Client) BackupStore(ctx context.Context, name string) (*pb.BackupStoreResponse, error) {
	if name == "" {
		name = BackupName(time.Now())
	}
	return c.Admin.BackupStore(ctx, &pb.BackupStoreRequest{Name: name})
}

// BackupName is backup-<UTC time>, the name of a backup the caller did not name.
func BackupName(now time.Time) string {
	return "backup-" + now.UTC().Format("20060102T150405Z")
}

// bearer sends the token on every call. The transport check is Dial's (TLS or a local address),
// so RequireTransportSecurity is false: a unix socket or loopback TCP is plaintext to gRPC.
type bearer struct{ value string }

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": b.value}, nil
}

func (bearer) RequireTransportSecurity() bool { return false }

// isLocalAddress: a unix socket, or TCP to localhost or a loopback IP.
func isLocalAddress(address string) bool {
	if strings.HasPrefix(address, "unix:") || strings.HasPrefix(address, "unix-abstract:") {
		return true
	}
	address = strings.TrimPrefix(strings.TrimPrefix(address, "dns:///"), "passthrough:///")
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
