package agentstate

import (
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	pb "github.com/agentstate/sidecar/clients/go/gen/agentstate/v1"
)

// RuleKind says why a call is (or is not) safe to send again as it is:
//
//   - "read-only": reads.
//   - "idempotent": a repeat finds nothing left to do (prune by a policy, delete what is gone).
//   - "by key": the request names what it creates or changes (a checkpoint id, a task id and
//     index, client event ids, an effect's idempotency key with the holder's lease); the server
//     answers a repeat from what the first one stored.
//   - "by lease" / "by token": the request carries the holder's lease id (Heartbeat) or an
//     effect's token (Complete/FailEffect).
//   - "by request id": the server answers a repeat with the first response; the interceptor fills
//     in a request_id (a UUID, on a copy of the request) when the caller gave none.
//   - "stream": streaming calls are not retried as calls.
type RuleKind string

const (
	ReadOnly    RuleKind = "read-only"
	Idempotent  RuleKind = "idempotent"
	ByKey       RuleKind = "by key"
	ByLease     RuleKind = "by lease"
	ByToken     RuleKind = "by token"
	ByRequestID RuleKind = "by request id"
	Stream      RuleKind = "stream"
)

// Rule is whether requests of one RPC are safe to repeat as sent. When is set for a conditional
// rule: a request it refuses is safe only with a request_id.
type Rule struct {
	Kind RuleKind
	When func(req proto.Message) bool
}

// Label is the kind as docs/clients.md writes it ("by key, else by request id" when conditional).
func (r Rule) Label() string {
	if r.When != nil {
		return string(r.Kind) + ", else by request id"
	}
	return string(r.Kind)
}

func (r Rule) safeAsSent(req proto.Message) bool {
	if r.Kind == ByRequestID || r.Kind == Stream {
		return false
	}
	return r.When == nil || r.When(req)
}

// namedPut: an identical re-put of a checkpoint id succeeds without change, unless steps without
// ids or events without client ids ride on it (they would be recorded again).
func namedPut(r *pb.PutCheckpointRequest) bool {
	if r.GetCheckpointId() == "" {
		return false
	}
	for _, s := range r.GetSteps() {
		if s.GetStepId() == "" {
			return false
		}
	}
	for _, e := range r.GetEvents() {
		if e.GetClientEventId() == "" {
			return false
		}
	}
	return true
}

var (
	ruleRead      = Rule{Kind: ReadOnly}
	ruleRequestID = Rule{Kind: ByRequestID}
	ruleStream    = Rule{Kind: Stream}
)

// Rules is every RPC of agentstate.v1 ("Service.Method") and whether it is safe to repeat as
// sent: the same table as the Python client's agentstate.retries.RULES and docs/clients.md
// "Which calls are retried" (which gives the reasons; the tests hold all three to it).
var Rules = map[string]Rule{
	"ThreadService.CreateThread": {Kind: ByKey, When: func(m proto.Message) bool {
		r := m.(*pb.CreateThreadRequest)
		return r.GetThreadId() != "" && r.GetIfExists() == pb.IfExists_IF_EXISTS_RETURN
	}},
	"ThreadService.GetThread":    ruleRead,
	"ThreadService.ListThreads":  ruleRead,
	"ThreadService.UpdateThread": ruleRequestID,
	"ThreadService.DeleteThread": {Kind: Idempotent, When: func(m proto.Message) bool {
		r := m.(*pb.DeleteThreadRequest)
		return r.GetAllowMissing() && r.GetEtag() == ""
	}},
	"ThreadService.CopyThread":               ruleRequestID,
	"ThreadService.PutCheckpoint":            {Kind: ByKey, When: func(m proto.Message) bool { return namedPut(m.(*pb.PutCheckpointRequest)) }},
	"ThreadService.PutWrites":                {Kind: ByKey},
	"ThreadService.GetCheckpoint":            ruleRead,
	"ThreadService.ListCheckpoints":          ruleRead,
	"ThreadService.PruneCheckpoints":         {Kind: Idempotent},
	"ThreadService.DeleteCheckpointsForRuns": {Kind: Idempotent},
	"ThreadService.DiffCheckpoints":          ruleRead,
	"ThreadService.GetChannelHistory":        ruleRead,
	"ThreadService.BatchWrite": {Kind: ByKey, When: func(m proto.Message) bool {
		for _, w := range m.(*pb.BatchWriteRequest).GetWrites() {
			switch op := w.GetOp().(type) {
			case *pb.BatchedWrite_PutCheckpoint:
				if !namedPut(op.PutCheckpoint) {
					return false
				}
			case *pb.BatchedWrite_PutWrites:
			default:
				return false
			}
		}
		return true
	}},
	"ThreadService.StreamWrites":  ruleStream,
	"AdminService.GetStoreStats":  ruleRead,
	"AdminService.CollectGarbage": {Kind: Idempotent},
	"AdminService.CheckIntegrity": ruleRead,
	"AdminService.BackupStore":    {Kind: ByKey},
	"RunService.CreateRun":        ruleRequestID,
	"RunService.GetRun":           ruleRead,
	"RunService.ListRuns":         ruleRead,
	"RunService.ClaimRun":         ruleRequestID,
	"RunService.Heartbeat":        {Kind: ByLease},
	"RunService.CompleteRun":      ruleRequestID,
	"RunService.FailRun":          ruleRequestID,
	"RunService.CancelRun":        ruleRequestID,
	"RunService.ResumeRun":        ruleRequestID,
	"RunService.ListBranches":     ruleRead,
	"RunService.PromoteBranch":    ruleRequestID,
	"RunService.StartStep":        ruleRequestID,
	"RunService.EndStep":          ruleRequestID,
	"RunService.RecordStep":       ruleRequestID,
	"RunService.ListSteps":        ruleRead,
	"RunService.GetThreadUsage":   ruleRead,
	"EventService.AppendEvents": {Kind: ByKey, When: func(m proto.Message) bool {
		for _, e := range m.(*pb.AppendEventsRequest).GetEvents() {
			if e.GetClientEventId() == "" {
				return false
			}
		}
		return true
	}},
	"EventService.ListEvents":             ruleRead,
	"EventService.WatchEvents":            ruleStream,
	"ArtifactService.UploadArtifact":      ruleStream,
	"ArtifactService.DownloadArtifact":    ruleStream,
	"ArtifactService.GetArtifact":         ruleRead,
	"ArtifactService.ListArtifacts":       ruleRead,
	"ArtifactService.SetOfficialArtifact": ruleRequestID,
	"EffectService.BeginEffect":           {Kind: ByKey},
	"EffectService.CompleteEffect":        {Kind: ByToken},
	"EffectService.FailEffect":            {Kind: ByToken},
	"EffectService.GetEffect":             ruleRead,
	"EffectService.ListEffects":           ruleRead,
	"ConversationService.AppendItems": {Kind: ByKey, When: func(r proto.Message) bool {
		for _, it := range r.(*pb.AppendItemsRequest).GetItems() {
			if it.GetClientItemId() == "" {
				return false
			}
		}
		return true
	}},
	"ConversationService.ListItems":           ruleRead,
	"ConversationService.GetItems":            ruleRead,
	"ConversationService.PopItem":             ruleRequestID,
	"ConversationService.ClearItems":          ruleRequestID,
	"ConversationService.GetConversation":     ruleRead,
	"ConversationService.SetPinnedItem":       ruleRequestID,
	"ConversationService.ListPinnedItems":     ruleRead,
	"ConversationService.DeletePinnedItem":    {Kind: Idempotent, When: func(r proto.Message) bool { return r.(*pb.DeletePinnedItemRequest).GetAllowMissing() }},
	"ConversationService.SetCompactionPolicy": ruleRequestID,
	"ConversationService.GetCompactionPolicy": ruleRead,
	"ConversationService.SetIdlePolicy":       ruleRequestID,
	"ConversationService.GetIdlePolicy":       ruleRead,
	"ConversationService.ClaimCompaction":     ruleRequestID,
	"ConversationService.SubmitSummary":       {Kind: ByLease},
	"ConversationService.ListCompactions":     ruleRead,
	"ConversationService.ListSummaries":       ruleRead,
	"ConversationService.ExpandSummary":       ruleRead,
	"ConversationService.GetContext":          ruleRead,
	"ConversationService.ReportUsage":         {Kind: ByKey},
	"MemoryService.PutMemoryItem":             ruleRequestID,
	"MemoryService.GetMemoryItem":             ruleRead,
	"MemoryService.DeleteMemoryItem": {Kind: Idempotent, When: func(m proto.Message) bool {
		r := m.(*pb.DeleteMemoryItemRequest)
		return r.GetAllowMissing() && r.GetEtag() == ""
	}},
	"MemoryService.BatchMemory": {Kind: ReadOnly, When: func(m proto.Message) bool {
		for _, op := range m.(*pb.BatchMemoryRequest).GetOps() {
			if op.GetPut() != nil || op.GetDelete() != nil {
				return false
			}
		}
		return true
	}},
	"MemoryService.ListMemoryNamespaces":    ruleRead,
	"MemoryService.SearchMemoryItems":       ruleRead,
	"MemoryService.GetMemoryItemHistory":    ruleRead,
	"MemoryService.SweepExpiredMemoryItems": {Kind: Idempotent},
	"RetentionService.SetRetentionPolicy":   ruleRequestID,
	"RetentionService.GetRetentionPolicy":   ruleRead,
	"RetentionService.ApplyRetention":       {Kind: Idempotent},
	"RetentionService.GetUsage":             ruleRead,
	"RetentionService.SetQuota":             {Kind: Idempotent},
	"RetentionService.GetQuota":             ruleRead,
	"SchemaService.RegisterSchema": {Kind: ByKey, When: func(m proto.Message) bool {
		return m.(*pb.RegisterSchemaRequest).GetEtag() == ""
	}},
	"SchemaService.GetSchema":         ruleRead,
	"SchemaService.ListSchemas":       ruleRead,
	"SchemaService.MigrateThread":     ruleStream,
	"SchemaService.MigrateNamespace":  ruleStream,
	"AdminService.ReencryptNamespace": {Kind: Idempotent},

	// NEW_RUN on the server creates a run: not repeated without a request id
	"ThreadService.ResumeThread": ruleRequestID,

	// streams: a failed export is made again, a failed import wrote nothing
	"TransferService.ExportNamespace": ruleStream,
	"TransferService.ImportNamespace": ruleStream,
}

// RuleOf is the rule of a full method name ("/agentstate.v1.ThreadService/GetThread"); ok is false
// for methods of other services.
func RuleOf(method string) (rule Rule, ok bool) {
	rest, found := strings.CutPrefix(method, "/agentstate.v1.")
	if !found {
		return Rule{}, false
	}
	rule, ok = Rules[strings.Replace(rest, "/", ".", 1)]
	return rule, ok
}

// safeAsSent says whether req may be sent again as it is.
func safeAsSent(method string, req any) bool {
	rule, ok := RuleOf(method)
	if !ok { // other services (e.g. grpc.health.v1): reads by name
		name := method[strings.LastIndex(method, "/")+1:]
		for _, p := range []string{"Get", "List", "Diff", "Check", "Watch"} {
			if strings.HasPrefix(name, p) {
				return true
			}
		}
		return false
	}
	m, isMsg := req.(proto.Message)
	return isMsg && rule.safeAsSent(m)
}

// prepare decides whether req may be retried: when it is safe as sent, or when it carries a
// request_id. With newID, a request that needs one and has none is copied and given one.
func prepare(method string, req any, newID func() string) (any, bool) {
	if safeAsSent(method, req) {
		return req, true
	}
	if rule, ok := RuleOf(method); ok && rule.Kind == Stream {
		return req, false
	}
	m, isMsg := req.(proto.Message)
	if !isMsg {
		return req, false
	}
	fd := m.ProtoReflect().Descriptor().Fields().ByName("request_id")
	if fd == nil || fd.Kind() != protoreflect.StringKind {
		return req, false
	}
	if m.ProtoReflect().Get(fd).String() != "" {
		return req, true
	}
	if newID == nil {
		return req, false
	}
	cp := proto.Clone(m)
	cp.ProtoReflect().Set(fd, protoreflect.ValueOfString(newID()))
	return cp, true
}

// idempotent says whether a call may be retried as it is: safe to repeat as sent, or carrying a request_id.
func idempotent(method string, req any) bool {
	_, ok := prepare(method, req, nil)
	return ok
}
