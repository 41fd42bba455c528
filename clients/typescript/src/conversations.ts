/**
 * The ConversationService calls (`client.conversations`): the conversation log, idle and compaction
 * policies, claims and summaries, pinned items, GetContext and ReportUsage (docs/conversations.md).
 *
 *   await c.conversations.append("chat-1", [item("message", "hi", { role: "user", clientItemId: "m1" })],
 *                                { createThread: true });
 *   const last20 = await c.conversations.latest("chat-1", 20);          // oldest first
 *   const ctx = await c.conversations.getContext("chat-1", 8000);
 *   contextHash(ctx.items) // equals ctx.contextHash
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import { blake3 } from "@noble/hashes/blake3";
import { encode, Opaque } from "./codec.js";
import type { CallOptions } from "./rpc.js";
import type { Client } from "./client.js";
import type { MemoryQueryInit } from "./memory.js";
import { encodeField, fromValue } from "./values.js";
import {
  ConfigScope,
  ConversationService,
  IdleAction,
  ItemKind,
  type ClaimCompactionResponse,
  type Compaction,
  type ContextItem,
  type ConversationItem,
  type GetContextResponse,
  type ItemInputSchema,
  type KnowledgeItemSchema,
} from "./gen/agentstate/v1/conversations_pb.js";

export type ItemInput = MessageInitShape<typeof ItemInputSchema>;
export type KnowledgeInput = MessageInitShape<typeof KnowledgeItemSchema>;
export type KindName = "message" | "tool_call" | "tool_result" | "reasoning" | "summary" | "tool_definition" | "other";

export const ITEM_KINDS: Record<KindName, ItemKind> = {
  message: ItemKind.MESSAGE,
  tool_call: ItemKind.TOOL_CALL,
  tool_result: ItemKind.TOOL_RESULT,
  reasoning: ItemKind.REASONING,
  summary: ItemKind.SUMMARY,
  tool_definition: ItemKind.TOOL_DEFINITION,
  other: ItemKind.OTHER,
};

export interface ItemOptions {
  role?: string;
  clientItemId?: string;
  callId?: string;
  toolName?: string;
  runId?: string;
  stepId?: string;
  /** The client's count: [count, tokenizer, exact]. */
  tokens?: [number, string, boolean];
  compact?: unknown;
  dedupeKey?: Uint8Array;
  /** A registered schema (c.schemas) the content (a map) follows at `schemaVersion`. */
  schema?: string;
  schemaVersion?: number;
}

/** `readSchemaVersion` of the conversation reads (and of append's answer): the schema version this code understands,
 * item contents stored under a registered schema at another version come back migrated (0: as stored). */
export interface ReadVersionOption {
  readSchemaVersion?: number;
}

/** An ItemInput with `content` encoded as every value of this client. */
export function item(kind: KindName | ItemKind, content: unknown, opts: ItemOptions = {}): ItemInput {
  return {
    kind: typeof kind === "string" ? ITEM_KINDS[kind] : kind,
    role: opts.role ?? "",
    clientItemId: opts.clientItemId ?? "",
    callId: opts.callId ?? "",
    toolName: opts.toolName ?? "",
    runId: opts.runId ?? "",
    stepId: opts.stepId ?? "",
    content: encodeField(content, "content"),
    tokens: opts.tokens ? { count: opts.tokens[0], tokenizer: opts.tokens[1], exact: opts.tokens[2] } : undefined,
    compact: opts.compact === undefined ? undefined : encodeField(opts.compact, "compact"),
    dedupeKey: opts.dedupeKey ?? new Uint8Array(),
    schema: opts.schema ?? "",
    schemaVersion: opts.schemaVersion ?? 0,
  };
}

/** A KnowledgeItem for GetContext. */
export function knowledge(content: unknown, opts: { label?: string; kind?: KindName; role?: string } = {}): KnowledgeInput {
  return { label: opts.label ?? "", kind: ITEM_KINDS[opts.kind ?? "message"], role: opts.role ?? "", content: encodeField(content, "content") };
}

/** The decoded content of a stored item (undefined when read without content). */
export function itemValue(it: ConversationItem): unknown {
  return it.content ? fromValue(it.content) : undefined;
}

function arrayHeader(n: number): Uint8Array {
  if (n < 16) return Uint8Array.of(0x90 | n);
  if (n < 0x10000) return Uint8Array.of(0xdc, n >> 8, n & 0xff);
  return Uint8Array.of(0xdd, (n >>> 24) & 0xff, (n >>> 16) & 0xff, (n >>> 8) & 0xff, n & 0xff);
}

function concat(parts: Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

const CONTEXT_PREFIX = new TextEncoder().encode("agentstate.v1 context\x00");
const COMPACTION_PREFIX = new TextEncoder().encode("agentstate.v1 compaction\x00");

/** The canonical encoding a Value message carries. */
function contentBytes(v: ContextItem["content"]): Uint8Array {
  if (v?.kind.case === "msgpack") return v.kind.value;
  if (v?.kind.case === "opaque") return encode(new Opaque(v.kind.value.type, v.kind.value.data));
  return encode(fromValue(v));
}

/** The context hash of GetContext's items (docs/conversations.md "Step 8"): equals the response's contextHash. */
export function contextHash(items: ContextItem[]): Uint8Array {
  const parts: Uint8Array[] = [CONTEXT_PREFIX, arrayHeader(items.length)];
  for (const it of items) {
    parts.push(arrayHeader(6), encode(it.source), encode(it.kind), encode(it.role), encode(it.callId), encode(it.toolName),
      contentBytes(it.content));
  }
  return blake3(concat(parts));
}

/** The content hash of a claimed compaction computed from its inputs: equals compaction.contentHash. */
export function compactionHash(c: Compaction): Uint8Array {
  const body = c.level === 1
    ? c.items.map((it) => [BigInt(it.seq), it.contentHash])
    : c.summaries.map((s) => [s.summaryId, s.text]);
  return blake3(concat([COMPACTION_PREFIX, encode([c.level, c.firstSeq, c.lastSeq, body])]));
}

function duration(ms: number) {
  return { seconds: BigInt(Math.floor(ms / 1000)), nanos: (ms % 1000) * 1e6 };
}

/** CompactionPolicy's fields (durations in ms); unset fields take the server defaults. */
export interface Policy {
  disabled?: boolean;
  triggerItems?: number;
  compactItems?: number;
  keepLastItems?: number;
  maxSummaryChars?: number;
  pyramidFanIn?: number;
  pyramidKeepLast?: number;
  maxLevels?: number;
  maxCompactChars?: number;
  fallbackAfterMs?: number;
  leaseTimeoutMs?: number;
}

/** The ConversationService calls on a client's channel (typed helpers over `stub`). */
export class Conversations {
  readonly stub;

  constructor(readonly client: Client) {
    this.stub = client.stub(ConversationService);
  }

  private get ns(): string {
    return this.client.namespace;
  }

  append(
    threadId: string,
    items: ItemInput[],
    opts: CallOptions & ReadVersionOption & { expectedLastSeq?: number; createThread?: boolean; reopen?: boolean; requestId?: string } = {},
  ) {
    // readSchemaVersion: each answered item's migration status (the answer has no content); FAIL appends nothing
    return this.stub.appendItems({
      namespace: this.ns, threadId, items,
      expectedLastSeq: opts.expectedLastSeq === undefined ? undefined : BigInt(opts.expectedLastSeq),
      createThread: opts.createThread ?? false, reopen: opts.reopen ?? false, requestId: opts.requestId ?? "",
      readSchemaVersion: opts.readSchemaVersion ?? 0,
    }, opts);
  }

  /** Every live item of a range (or its newest `latest`), oldest first, page by page. */
  async *list(threadId: string, opts: CallOptions & ReadVersionOption & { startSeq?: number; endSeq?: number; latest?: number; pageSize?: number; omitContent?: boolean } = {}) {
    let pageToken = "";
    do {
      const resp = await this.stub.listItems({
        namespace: this.ns, threadId, startSeq: BigInt(opts.startSeq ?? 0), endSeq: BigInt(opts.endSeq ?? 0),
        latest: opts.latest ?? 0, pageSize: opts.pageSize ?? 0, pageToken, omitContent: opts.omitContent ?? false,
        readSchemaVersion: opts.readSchemaVersion ?? 0,
      }, opts);
      yield* resp.items;
      pageToken = resp.nextPageToken;
    } while (pageToken);
  }

  /** The newest `n` items (every item with 0), oldest first. */
  async latest(threadId: string, n = 0, opts: CallOptions & ReadVersionOption & { pageSize?: number } = {}): Promise<ConversationItem[]> {
    const out: ConversationItem[] = [];
    for await (const it of this.list(threadId, { ...opts, latest: n, pageSize: opts.pageSize ?? 1000 })) out.push(it);
    return out;
  }

  get(threadId: string, seqs: number[] = [], clientItemIds: string[] = [], opts: CallOptions & ReadVersionOption & { allowMissing?: boolean } = {}) {
    return this.stub.getItems({ namespace: this.ns, threadId, seqs: seqs.map(BigInt), clientItemIds, allowMissing: opts.allowMissing ?? false,
      readSchemaVersion: opts.readSchemaVersion ?? 0 }, opts);
  }

  /** PopItem: the removed newest item, undefined when the log was empty. */
  async pop(threadId: string, opts: CallOptions & { expectedLastSeq?: number; requestId?: string } = {}): Promise<ConversationItem | undefined> {
    const resp = await this.stub.popItem({
      namespace: this.ns, threadId, requestId: opts.requestId ?? "",
      expectedLastSeq: opts.expectedLastSeq === undefined ? undefined : BigInt(opts.expectedLastSeq),
    }, opts);
    return resp.item;
  }

  clear(threadId: string, opts: CallOptions & { requestId?: string } = {}) {
    return this.stub.clearItems({ namespace: this.ns, threadId, requestId: opts.requestId ?? "" }, opts);
  }

  async conversation(threadId: string, opts: CallOptions = {}) {
    return (await this.stub.getConversation({ namespace: this.ns, threadId }, opts)).conversation!;
  }

  setIdlePolicy(opts: CallOptions & { threadId?: string; ttlMs?: number; action?: "close" | "delete"; clear?: boolean } = {}) {
    return this.stub.setIdlePolicy({
      namespace: this.ns, threadId: opts.threadId ?? "", clear: opts.clear ?? false,
      scope: opts.threadId ? ConfigScope.THREAD : ConfigScope.NAMESPACE,
      policy: opts.clear ? undefined : {
        ttl: opts.ttlMs ? duration(opts.ttlMs) : undefined,
        action: opts.action === "delete" ? IdleAction.DELETE : IdleAction.CLOSE,
      },
    }, opts);
  }

  setCompactionPolicy(policy: Policy, opts: CallOptions & { threadId?: string; clear?: boolean } = {}) {
    const { fallbackAfterMs, leaseTimeoutMs, ...rest } = policy;
    return this.stub.setCompactionPolicy({
      namespace: this.ns, threadId: opts.threadId ?? "", clear: opts.clear ?? false,
      scope: opts.threadId ? ConfigScope.THREAD : ConfigScope.NAMESPACE,
      policy: opts.clear ? undefined : {
        ...rest,
        fallbackAfter: fallbackAfterMs === undefined ? undefined : duration(fallbackAfterMs),
        leaseTimeout: leaseTimeoutMs === undefined ? undefined : duration(leaseTimeoutMs),
      },
    }, opts);
  }

  /** ClaimCompaction: a due compaction with its inputs and a lease, or undefined when none was (within waitMs). */
  async claimCompaction(opts: CallOptions & { worker: string; threadId?: string; leaseMs?: number; waitMs?: number }): Promise<ClaimCompactionResponse | undefined> {
    const waitMs = opts.waitMs ?? 0;
    const resp = await this.stub.claimCompaction({
      namespace: this.ns, worker: opts.worker, threadId: opts.threadId ?? "",
      leaseTimeout: opts.leaseMs ? duration(opts.leaseMs) : undefined,
      waitTimeout: waitMs ? duration(waitMs) : undefined,
    }, { ...opts, timeoutMs: opts.timeoutMs ?? this.client.timeoutMs + waitMs });
    return resp.compaction ? resp : undefined;
  }

  /** SubmitSummary of a claim (its ids, range and content hash sent back as the claim gave them). */
  submitSummary(claim: ClaimCompactionResponse, text: string, opts: CallOptions & { producer: string; requestId?: string }) {
    const c = claim.compaction!;
    return this.stub.submitSummary({
      namespace: this.ns, threadId: c.threadId, compactionId: c.compactionId, leaseId: claim.leaseId, level: c.level,
      firstSeq: c.firstSeq, lastSeq: c.lastSeq, contentHash: c.contentHash, text, producer: opts.producer,
      requestId: opts.requestId ?? "",
    }, opts);
  }

  setPin(pinId: string, kind: KindName, content: unknown, opts: CallOptions & { threadId?: string; position?: number; role?: string; toolName?: string } = {}) {
    return this.stub.setPinnedItem({
      namespace: this.ns, scope: opts.threadId ? ConfigScope.THREAD : ConfigScope.NAMESPACE, threadId: opts.threadId ?? "",
      pinId, kind: ITEM_KINDS[kind], content: encodeField(content, "content"), position: opts.position ?? 0,
      role: opts.role ?? "", toolName: opts.toolName ?? "",
    }, opts);
  }

  getContext(
    threadId: string,
    budgetTokens: number,
    opts: CallOptions & ReadVersionOption & { knowledge?: KnowledgeInput[]; tokenizer?: string; keepLastItems?: number; omitExplanation?: boolean;
      /** memoryQuery(...) of memory.ts: its hits join the knowledge layer after `knowledge`. */
      memoryQuery?: MemoryQueryInit } = {},
  ): Promise<GetContextResponse> {
    return this.stub.getContext({
      namespace: this.ns, threadId, budgetTokens, knowledge: opts.knowledge ?? [], tokenizer: opts.tokenizer ?? "",
      keepLastItems: opts.keepLastItems, omitExplanation: opts.omitExplanation ?? false, memoryQuery: opts.memoryQuery,
      readSchemaVersion: opts.readSchemaVersion ?? 0,
    }, opts);
  }

  reportUsage(threadId: string, ctx: GetContextResponse, inputTokens: number, opts: CallOptions & { model?: string } = {}) {
    return this.stub.reportUsage({
      namespace: this.ns, threadId, contextHash: ctx.contextHash, estimatedRawTokens: ctx.estimatedRawTokens,
      clientCountedTokens: ctx.clientCountedTokens, inputTokens: BigInt(inputTokens), model: opts.model ?? "",
    }, opts);
  }
}
