/**
 * Memory items (MemoryService, docs/memory.md): `c.memory` on a Client.
 *
 *   await c.memory.put(["users", "u-42", "prefs"], "drink", { text: "likes tea" }, { vectors: { text: [0.1, 0.7] } });
 *   const item = await c.memory.get(["users", "u-42", "prefs"], "drink");   // MemoryItem | undefined
 *   memoryValue(item);                                                      // { text: "likes tea" }
 *   const hits = await c.memory.search(["users"], { filter: { n: { $gte: 2 } }, vector: [0.1, 0.6], limit: 5 });
 *   for await (const path of c.memory.listNamespaces({ prefix: ["users", "*"], maxDepth: 2 })) ...
 *
 * Filters are expression maps (`{"a.b": 1, n: {$gt: 2}, $or: [...]}`, the AGENTSTATE mode) or MemoryFilter
 * messages. Vectors are number arrays (sent as float32).
 *
 *   const q = memoryQuery(["users", "u-42"], { filter: { kind: "pref" }, vector: [0.1, 0.6], limit: 3 });
 *   const ctx = await c.conversations.getContext("chat-1", 8000, { memoryQuery: q });  // hits join the knowledge
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { CallOptions, Stub } from "./rpc.js";
import { encodeField, fromValue } from "./values.js";
import {
  BatchSemantics,
  MemoryOrder,
  MemoryOrigin,
  MemoryService,
  Unscored,
  VectorUpdate,
  type MemoryFilter,
  type MemoryFilterSchema,
  type MemoryItem,
  type MemoryItemRevision,
  type MemoryOpResult,
  type MemoryOpSchema,
  type MemoryQuerySchema,
  type PutMemoryItemRequestSchema,
  type PutMemoryItemResponse,
  type DeleteMemoryItemResponse,
  type ScoredMemoryItem,
  type SearchMemoryItemsRequestSchema,
} from "./gen/agentstate/v1/memory_pb.js";
import type { GenService } from "@bufbuild/protobuf/codegenv2";

export type MemoryStub = Stub<typeof MemoryService extends GenService<infer S> ? S : never>;

/** The decoded value of a MemoryItem (undefined when the read omitted it). */
export function memoryValue(item: MemoryItem | undefined): unknown {
  return item?.value ? fromValue(item.value) : undefined;
}

export interface PutMemoryOptions extends CallOptions {
  vectors?: Record<string, number[]>;
  vectorSpace?: string;
  mergeVectors?: boolean;
  ttlMinutes?: number;
  origin?: "explicit" | "inferred";
  actor?: string;
  etag?: string;
  mustNotExist?: boolean;
  requestId?: string;
  /** A registered schema (c.schemas) the value follows at `schemaVersion`. */
  schema?: string;
  schemaVersion?: number;
  provenance?: { threadId?: string; runId?: string; conversationSeq?: bigint; stepId?: string; checkpointId?: string };
}

export interface SearchMemoryOptions extends CallOptions {
  filter?: Record<string, unknown> | MemoryFilter;
  vector?: number[];
  vectorSpace?: string;
  fields?: string[];
  unscoredOnly?: boolean;
  order?: "updated" | "insertion" | "path_key";
  limit?: number;
  offset?: number;
  refreshTtl?: boolean;
  omitValues?: boolean;
  includeVectors?: boolean;
  /** Each hit's value migrated to this version of its schema (as get). */
  readSchemaVersion?: number;
}

const ORDERS = { updated: MemoryOrder.UPDATED_DESC, insertion: MemoryOrder.INSERTION, path_key: MemoryOrder.PATH_KEY };

function isFilterMessage(f: unknown): f is MemoryFilter {
  return typeof f === "object" && f !== null && (f as { $typeName?: string }).$typeName === "agentstate.v1.MemoryFilter";
}

/** A MemoryFilter init from an expression map (or a MemoryFilter, as it is). */
export function memoryFilter(f: Record<string, unknown> | MemoryFilter): MessageInitShape<typeof MemoryFilterSchema> {
  if (isFilterMessage(f)) return f;
  return { kind: { case: "expression", value: encodeField(f, "filter") } };
}

function segments(pattern: string[] | undefined) {
  return (pattern ?? []).map((s) => ({ kind: s === "*" ? { case: "any" as const, value: true } : { case: "label" as const, value: s } }));
}

export function putRequest(namespace: string, path: string[], key: string, value: Record<string, unknown>,
  opts: PutMemoryOptions = {}): MessageInitShape<typeof PutMemoryItemRequestSchema> {
  const vectors: Record<string, { values: number[] }> = {};
  for (const [name, v] of Object.entries(opts.vectors ?? {})) vectors[name] = { values: v };
  return {
    namespace, path, key, value: encodeField(value, "value"), vectors, vectorSpace: opts.vectorSpace ?? "",
    vectorUpdate: opts.mergeVectors ? VectorUpdate.MERGE : opts.vectors ? VectorUpdate.REPLACE : VectorUpdate.UNSPECIFIED,
    ttl: opts.ttlMinutes === undefined ? undefined : {
      seconds: BigInt(Math.floor((opts.ttlMinutes * 60_000) / 1000)),
      nanos: (Math.round(opts.ttlMinutes * 60_000) % 1000) * 1_000_000,
    },
    origin: opts.origin === "explicit" ? MemoryOrigin.EXPLICIT : opts.origin === "inferred" ? MemoryOrigin.INFERRED : MemoryOrigin.UNSPECIFIED,
    actor: opts.actor ?? "", etag: opts.etag ?? "", mustNotExist: opts.mustNotExist ?? false, requestId: opts.requestId ?? "",
    schema: opts.schema ?? "", schemaVersion: opts.schemaVersion ?? 0, provenance: opts.provenance,
  };
}

export function searchRequest(namespace: string, prefix: string[], opts: SearchMemoryOptions = {}):
  MessageInitShape<typeof SearchMemoryItemsRequestSchema> {
  return {
    namespace, pathPrefix: prefix, order: opts.order ? ORDERS[opts.order] : MemoryOrder.UNSPECIFIED,
    limit: opts.limit ?? 0, offset: opts.offset ?? 0, omitValues: opts.omitValues ?? false,
    includeVectors: opts.includeVectors ?? false, refreshTtl: opts.refreshTtl,
    readSchemaVersion: opts.readSchemaVersion ?? 0,
    filter: opts.filter === undefined ? undefined : memoryFilter(opts.filter),
    vector: opts.vector === undefined ? undefined : {
      vector: { values: opts.vector }, space: opts.vectorSpace ?? "", fields: opts.fields ?? [],
      unscored: opts.unscoredOnly ? Unscored.ONLY : Unscored.UNSPECIFIED,
    },
  };
}

export interface MemoryQueryOptions {
  filter?: Record<string, unknown> | MemoryFilter;
  vector?: number[];
  vectorSpace?: string;
  fields?: string[];
  order?: "updated" | "insertion" | "path_key";
  /** How many hits at most (default 10). */
  limit?: number;
}

export type MemoryQueryInit = MessageInitShape<typeof MemoryQuerySchema>;

/** A MemoryQuery for GetContext (`conversations.getContext(..., { memoryQuery })`): its hits join the knowledge
 * layer. The options mean what they mean in a search. */
export function memoryQuery(prefix: string[] = [], opts: MemoryQueryOptions = {}): MemoryQueryInit {
  const s = searchRequest("", prefix, { ...opts, limit: opts.limit ?? 10 });
  return { pathPrefix: s.pathPrefix, filter: s.filter, vector: s.vector, order: s.order, limit: s.limit };
}

/** MemoryService calls in a client's namespace. */
export class Memory {
  constructor(readonly stub: MemoryStub, readonly namespace: string) {}

  put(path: string[], key: string, value: Record<string, unknown>, opts: PutMemoryOptions = {}): Promise<PutMemoryItemResponse> {
    return this.stub.putMemoryItem(putRequest(this.namespace, path, key, value, opts), opts);
  }

  /** The live item, or undefined (`readSchemaVersion`: its value migrated to that version of its schema). */
  async get(path: string[], key: string, opts: CallOptions & { refreshTtl?: boolean; includeVectors?: boolean; readSchemaVersion?: number } = {}):
    Promise<MemoryItem | undefined> {
    const resp = await this.stub.getMemoryItem({ namespace: this.namespace, path, key, allowMissing: true,
      refreshTtl: opts.refreshTtl, includeVectors: opts.includeVectors ?? false, readSchemaVersion: opts.readSchemaVersion ?? 0 }, opts);
    return resp.item;
  }

  delete(path: string[], key: string, opts: CallOptions & { purge?: boolean; allowMissing?: boolean; etag?: string; actor?: string } = {}):
    Promise<DeleteMemoryItemResponse> {
    return this.stub.deleteMemoryItem({ namespace: this.namespace, path, key, purge: opts.purge ?? false,
      allowMissing: opts.allowMissing ?? true, etag: opts.etag ?? "", actor: opts.actor ?? "" }, opts);
  }

  async search(prefix: string[] = [], opts: SearchMemoryOptions = {}): Promise<ScoredMemoryItem[]> {
    return (await this.stub.searchMemoryItems(searchRequest(this.namespace, prefix, opts), opts)).items;
  }

  async batch(ops: MessageInitShape<typeof MemoryOpSchema>[], opts: CallOptions & { semantics?: "sequential" | "snapshot"; requestId?: string } = {}):
    Promise<MemoryOpResult[]> {
    const semantics = opts.semantics === "snapshot" ? BatchSemantics.SNAPSHOT : BatchSemantics.SEQUENTIAL;
    return (await this.stub.batchMemory({ namespace: this.namespace, ops, semantics, requestId: opts.requestId ?? "" }, opts)).results;
  }

  /** Paths holding live items, label by label in UTF-8 order; `"*"` matches any label. */
  async *listNamespaces(opts: CallOptions & { prefix?: string[]; suffix?: string[]; maxDepth?: number; includeEmpty?: boolean } = {}):
    AsyncGenerator<string[]> {
    let pageToken = "";
    do {
      const resp = await this.stub.listMemoryNamespaces({ namespace: this.namespace, prefix: segments(opts.prefix),
        suffix: segments(opts.suffix), maxDepth: opts.maxDepth, includeEmpty: opts.includeEmpty ?? false, pageSize: 1000, pageToken }, opts);
      for (const n of resp.namespaces) yield n.path;
      pageToken = resp.nextPageToken;
    } while (pageToken);
  }

  /** The item's revisions, newest first (`readSchemaVersion` with `includeValues`: each value migrated). */
  async *history(path: string[], key: string, opts: CallOptions & { includeValues?: boolean; readSchemaVersion?: number } = {}):
    AsyncGenerator<MemoryItemRevision> {
    let pageToken = "";
    do {
      const resp = await this.stub.getMemoryItemHistory({ namespace: this.namespace, path, key,
        includeValues: opts.includeValues ?? false, pageToken, readSchemaVersion: opts.readSchemaVersion ?? 0 }, opts);
      yield* resp.revisions;
      pageToken = resp.nextPageToken;
    } while (pageToken);
  }

  async sweep(opts: CallOptions & { allNamespaces?: boolean } = {}): Promise<bigint> {
    return (await this.stub.sweepExpiredMemoryItems({ namespace: opts.allNamespaces ? "" : this.namespace }, opts)).expiredItems;
  }
}
