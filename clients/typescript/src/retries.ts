/**
 * Which calls may be sent again: the table of every agentstate.v1 RPC, the same as the
 * Python client's (`agentstate.retries.RULES`) and docs/clients.md "Which calls are
 * retried" (the tests hold all three to it). A call that is safe to repeat is retried on
 * transient errors until its deadline; one that is safe only with a request_id gets one
 * (a UUID) when the caller gave none, unless `autoRequestId` is off.
 *
 * Kinds: `read-only`; `idempotent` (a repeat finds nothing left to do); `by key` (the
 * request names what it creates or changes, and the server answers a repeat from what
 * the first one stored); `by lease` / `by token` (it carries the holder's lease id or an
 * effect's token); `by request id` (the server answers a repeat with the first response);
 * `stream` (streaming calls are not retried as calls). A conditional rule ("by key, else
 * by request id") is safe as sent when its condition holds, else only with a request id.
 */
import { clone, type DescMessage, type DescMethod } from "@bufbuild/protobuf";
import { IfExists } from "./gen/agentstate/v1/threads_pb.js";

export type RuleKind = "read-only" | "idempotent" | "by key" | "by lease" | "by token" | "by request id" | "stream";

export interface Rule {
  kind: RuleKind;
  /** For a conditional rule: whether this request is safe as sent. */
  when?: (request: any) => boolean;
}

/** The kind as docs/clients.md writes it ("by key, else by request id" for a conditional rule). */
export function ruleLabel(rule: Rule): string {
  return rule.when ? `${rule.kind}, else by request id` : rule.kind;
}

const READ: Rule = { kind: "read-only" };
const REQUEST_ID: Rule = { kind: "by request id" };
const STREAM: Rule = { kind: "stream" };

type Step = { stepId: string };
type Ev = { clientEventId: string };

/** A put with a checkpoint id is re-put identically, unless steps without ids or events without client ids ride on it. */
function namedPut(r: { checkpointId: string; steps?: Step[]; events?: Ev[] }): boolean {
  return r.checkpointId !== "" && (r.steps ?? []).every((s) => s.stepId !== "") && (r.events ?? []).every((e) => e.clientEventId !== "");
}

function batchItem(w: { op: { case?: string; value?: unknown } }): boolean {
  if (w.op.case === "putCheckpoint") return namedPut(w.op.value as never);
  return w.op.case === "putWrites";
}

/** Every RPC of agentstate.v1 ("Service.Method") and whether it is safe to repeat as sent (reasons: docs/clients.md). */
export const RULES: Record<string, Rule> = {
  "ThreadService.CreateThread": { kind: "by key", when: (r) => r.threadId !== "" && r.ifExists === IfExists.RETURN },
  "ThreadService.GetThread": READ,
  "ThreadService.ListThreads": READ,
  "ThreadService.UpdateThread": REQUEST_ID,
  "ThreadService.DeleteThread": { kind: "idempotent", when: (r) => r.allowMissing && r.etag === "" },
  "ThreadService.CopyThread": REQUEST_ID,
  "ThreadService.PutCheckpoint": { kind: "by key", when: namedPut },
  "ThreadService.PutWrites": { kind: "by key" },
  "ThreadService.GetCheckpoint": READ,
  "ThreadService.ListCheckpoints": READ,
  "ThreadService.PruneCheckpoints": { kind: "idempotent" },
  "ThreadService.DeleteCheckpointsForRuns": { kind: "idempotent" },
  "ThreadService.DiffCheckpoints": READ,
  "ThreadService.GetChannelHistory": READ,
  "ThreadService.BatchWrite": { kind: "by key", when: (r) => r.writes.every(batchItem) },
  "ThreadService.StreamWrites": STREAM,
  "AdminService.GetStoreStats": READ,
  "AdminService.CollectGarbage": { kind: "idempotent" },
  "AdminService.CheckIntegrity": READ,
  "AdminService.BackupStore": { kind: "by key" },
  "AdminService.ReencryptNamespace": { kind: "idempotent" },
  "RunService.CreateRun": REQUEST_ID,
  "RunService.GetRun": READ,
  "RunService.ListRuns": READ,
  "RunService.ClaimRun": REQUEST_ID,
  "RunService.Heartbeat": { kind: "by lease" },
  "RunService.CompleteRun": REQUEST_ID,
  "RunService.FailRun": REQUEST_ID,
  "RunService.CancelRun": REQUEST_ID,
  "RunService.ResumeRun": REQUEST_ID,
  "RunService.ListBranches": READ,
  "RunService.PromoteBranch": REQUEST_ID,
  "RunService.StartStep": REQUEST_ID,
  "RunService.EndStep": REQUEST_ID,
  "RunService.RecordStep": REQUEST_ID,
  "RunService.ListSteps": READ,
  "RunService.GetThreadUsage": READ,
  "EventService.AppendEvents": { kind: "by key", when: (r) => (r.events as Ev[]).every((e) => e.clientEventId !== "") },
  "EventService.ListEvents": READ,
  "EventService.WatchEvents": STREAM,
  "ArtifactService.UploadArtifact": STREAM,
  "ArtifactService.DownloadArtifact": STREAM,
  "ArtifactService.GetArtifact": READ,
  "ArtifactService.ListArtifacts": READ,
  "ArtifactService.SetOfficialArtifact": REQUEST_ID,
  "EffectService.BeginEffect": { kind: "by key" },
  "EffectService.CompleteEffect": { kind: "by token" },
  "EffectService.FailEffect": { kind: "by token" },
  "EffectService.GetEffect": READ,
  "EffectService.ListEffects": READ,
  "ConversationService.AppendItems": { kind: "by key", when: (r) => (r.items as { clientItemId: string }[]).every((i) => i.clientItemId !== "") },
  "ConversationService.ListItems": READ,
  "ConversationService.GetItems": READ,
  "ConversationService.PopItem": REQUEST_ID,
  "ConversationService.ClearItems": REQUEST_ID,
  "ConversationService.GetConversation": READ,
  "ConversationService.SetPinnedItem": REQUEST_ID,
  "ConversationService.ListPinnedItems": READ,
  "ConversationService.DeletePinnedItem": { kind: "idempotent", when: (r) => r.allowMissing },
  "ConversationService.SetCompactionPolicy": REQUEST_ID,
  "ConversationService.GetCompactionPolicy": READ,
  "ConversationService.SetIdlePolicy": REQUEST_ID,
  "ConversationService.GetIdlePolicy": READ,
  "ConversationService.ClaimCompaction": REQUEST_ID,
  "ConversationService.SubmitSummary": { kind: "by lease" },
  "ConversationService.ListCompactions": READ,
  "ConversationService.ListSummaries": READ,
  "ConversationService.ExpandSummary": READ,
  "ConversationService.GetContext": READ,
  "ConversationService.ReportUsage": { kind: "by key" },
  "MemoryService.PutMemoryItem": REQUEST_ID,
  "MemoryService.GetMemoryItem": READ,
  "MemoryService.DeleteMemoryItem": { kind: "idempotent", when: (r) => (r.allowMissing as boolean) && r.etag === "" },
  "MemoryService.BatchMemory": {
    kind: "read-only",
    when: (r) => (r.ops as { op: { case?: string } }[]).every((o) => o.op.case !== "put" && o.op.case !== "delete"),
  },
  "MemoryService.ListMemoryNamespaces": READ,
  "MemoryService.SearchMemoryItems": READ,
  "MemoryService.GetMemoryItemHistory": READ,
  "MemoryService.SweepExpiredMemoryItems": { kind: "idempotent" },
  "RetentionService.SetRetentionPolicy": REQUEST_ID,
  "RetentionService.GetRetentionPolicy": READ,
  "RetentionService.ApplyRetention": { kind: "idempotent" },
  "RetentionService.GetUsage": READ,
  "RetentionService.SetQuota": { kind: "idempotent" },
  "RetentionService.GetQuota": READ,
  "SchemaService.RegisterSchema": { kind: "by key", when: (r) => r.etag === "" },
  "SchemaService.GetSchema": READ,
  "SchemaService.ListSchemas": READ,
  "SchemaService.MigrateThread": STREAM,
  "SchemaService.MigrateNamespace": STREAM,
  "ThreadService.ResumeThread": REQUEST_ID,
  "TransferService.ExportNamespace": STREAM,
  "TransferService.ImportNamespace": STREAM,
};

/** The rule of a method ("agentstate.v1.ThreadService" + "GetThread"), or undefined for other services. */
export function ruleOf(method: DescMethod): Rule | undefined {
  const service = method.parent.typeName;
  return service.startsWith("agentstate.v1.") ? RULES[`${service.slice("agentstate.v1.".length)}.${method.name}`] : undefined;
}

const READ_PREFIXES = ["Get", "List", "Diff", "Check", "Watch"];

/** Whether `request` of `method` may be sent again as it is. */
export function safeAsSent(method: DescMethod, request: unknown): boolean {
  const rule = ruleOf(method);
  if (!rule) return READ_PREFIXES.some((p) => method.name.startsWith(p)); // e.g. grpc.health.v1
  if (rule.kind === "by request id" || rule.kind === "stream") return false;
  return !rule.when || rule.when(request);
}

/**
 * Decide whether `request` may be retried: when it is safe as sent; else when it carries a
 * request_id, which is filled in (a UUID, on a copy) when `newRequestId` gives one. Returns the
 * request to send and whether it may be retried.
 */
export function prepare<T>(method: DescMethod, request: T, newRequestId?: () => string): { request: T; retry: boolean } {
  if (safeAsSent(method, request)) return { request, retry: true };
  if (ruleOf(method)?.kind === "stream" || !method.input.fields.some((f) => f.name === "request_id")) return { request, retry: false };
  const r = request as { requestId: string };
  if (r.requestId !== "") return { request, retry: true };
  if (!newRequestId) return { request, retry: false };
  const copy = clone(method.input as DescMessage, request as never) as unknown as { requestId: string };
  copy.requestId = newRequestId();
  return { request: copy as T, retry: true };
}
