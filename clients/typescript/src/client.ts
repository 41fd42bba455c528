/**
 * A thin client of the agentstate.v1 API on @grpc/grpc-js.
 *
 *   const c = new Client("unix:sidecar-data/sidecar.sock");
 *   const first = await c.putCheckpoint("t1", { messages: ["hi"] });
 *   await c.putCheckpoint("t1", { messages: new Append(["hello"]) }, { parentId: first.checkpoint!.checkpointId });
 *   console.log(await c.getValues("t1"));
 *   for await (const cp of c.listCheckpoints("t1")) console.log(cp.checkpointId);
 *   c.close();
 *
 * Every call takes `{ timeoutMs }` (a deadline for the whole call, retries included;
 * default 30 s) and throws an AgentStateError subclass on failure. Calls that are safe
 * to repeat (retries.ts: reads, and writes idempotent by key, lease or token) are
 * retried on transient errors (UNAVAILABLE, OVERLOADED, CONFLICT) until the deadline,
 * waiting for the channel to be ready, so they ride out a sidecar restart; other
 * mutating calls are retried only with a request_id, which the client fills in (a UUID)
 * unless told otherwise, so a retried write is applied once. List calls are async
 * iterators that fetch pages as needed. `runs`, `events`, `effects` and `artifacts` are
 * typed stubs of those services with the same deadlines and retries; `startRun` and
 * `claimRun` hold a run (runs.ts: heartbeats that survive a restart, the run's writes).
 */
import { randomUUID } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import type { GenService, GenServiceMethods } from "@bufbuild/protobuf/codegenv2";
import type { DescMessage, DescMethod, MessageInitShape, MessageShape } from "@bufbuild/protobuf";
import { connect, OWN_CONNECTION, type OwnConnection, DEFAULT_RETRY, DEFAULT_TIMEOUT_MS, resumable, stub, type CallOptions, type RetryPolicy, type Stub, type TlsOptions } from "./rpc.js";
import { safeAsSent } from "./retries.js";
import { HeldRun } from "./runs.js";
import { Conversations } from "./conversations.js";
import { Memory } from "./memory.js";
import { MemoryService } from "./gen/agentstate/v1/memory_pb.js";
import { Schemas } from "./schemas.js";
import { SchemaService } from "./gen/agentstate/v1/schemas_pb.js";
import { Transfer } from "./transfer.js";
import { TransferService } from "./gen/agentstate/v1/transfer_pb.js";
import type { CreateRunResponse } from "./gen/agentstate/v1/runs_pb.js";
import { channelWrite, decodeMap, encodeField, encodeMap, fromValue } from "./values.js";
import { newId } from "./ids.js";
import {
  ThreadService,
  IfExists,
  type ChannelChange,
  type Checkpoint,
  type DeleteThreadResponse,
  type CopyThreadResponse,
  type PutCheckpointResponse,
  type PutWritesResponse,
  type Thread,
} from "./gen/agentstate/v1/threads_pb.js";
import {
  AdminService,
  type CheckIntegrityResponse,
  type BackupStoreResponse,
  type CollectGarbageResponse,
  type GetStoreStatsResponse,
} from "./gen/agentstate/v1/admin_pb.js";
import { RunService, type ClaimRunRequestSchema, type CreateRunRequestSchema, type StepRecordSchema } from "./gen/agentstate/v1/runs_pb.js";
import { EventService, type EventInputSchema } from "./gen/agentstate/v1/events_pb.js";
import { EffectService, type EffectCompletionSchema } from "./gen/agentstate/v1/effects_pb.js";
import { ArtifactService } from "./gen/agentstate/v1/artifacts_pb.js";

export const DEFAULT_ADDRESS = "unix:sidecar-data/sidecar.sock";

export interface ClientOptions {
  /** Tenant namespace of every call (default "default"). */
  namespace?: string;
  /** Default deadline of a call, retries included (ms, default 30000). */
  timeoutMs?: number;
  /** How transient failures are retried (default: until the deadline; `{ maxAttempts: 1 }` turns it off). */
  retry?: Partial<RetryPolicy>;
  /** Fill in a request_id (UUID) on mutating calls that have none, making them safe to retry (default true). */
  autoRequestId?: boolean;
  /** Whether calls wait for the sidecar to be reachable (default: the calls that may be retried). */
  waitForReady?: boolean;
  /** TLS or other channel credentials (default plaintext; unix sockets rely on file permissions). */
  credentials?: grpc.ChannelCredentials;
  /** Bearer token for a sidecar started with `--auth-file` (sent over TLS or a local connection only). */
  token?: string;
  /** TLS for a sidecar serving TLS (`true`: the system's roots). */
  tls?: TlsOptions | boolean;
  channelOptions?: grpc.ChannelOptions;
}

/**
 * Whether a call may be retried: when it is safe to repeat as sent (the table in retries.ts:
 * reads, PutWrites, PutCheckpoint with a checkpoint id, Heartbeat, BeginEffect, ...) or when it
 * carries a request_id (the server returns the first result).
 */
export function idempotent(method: DescMethod, request: unknown): boolean {
  const r = request as { requestId?: unknown };
  return safeAsSent(method, request) || (typeof r.requestId === "string" && r.requestId !== "");
}

/** The fields of a request to fill in (an init object, not a message). */
export type RequestFields<Desc extends DescMessage> = Exclude<MessageInitShape<Desc>, MessageShape<Desc>>;

export type IfExistsPolicy = "error" | "return" | "merge";
const IF_EXISTS: Record<IfExistsPolicy, IfExists> = {
  error: IfExists.ERROR,
  return: IfExists.RETURN,
  merge: IfExists.MERGE_METADATA,
};

export interface PutCheckpointOptions extends CallOptions {
  checkpointId?: string;
  parentId?: string;
  baseId?: string;
  checkpointNs?: string;
  metadata?: Record<string, unknown>;
  extra?: unknown;
  /** The etag the head must have ("" expects no checkpoint yet). */
  expectedHeadEtag?: string;
  /** A registered schema (c.schemas) the channel values follow at `schemaVersion`. */
  schema?: string;
  schemaVersion?: number;
  requireThread?: boolean;
  requestId?: string;
  /** A run's put: its run id and lease id (HeldRun.putCheckpoint fills them in). */
  runId?: string;
  leaseId?: string;
  /** Steps, events and effect completions committed with the put (a run's put only). */
  steps?: MessageInitShape<typeof StepRecordSchema>[];
  events?: MessageInitShape<typeof EventInputSchema>[];
  effects?: MessageInitShape<typeof EffectCompletionSchema>[];
}

export interface PendingWriteInput {
  taskId: string;
  idx: number;
  channel: string;
  value: unknown;
  taskPath?: string;
  replace?: boolean;
}

export interface GetCheckpointOptions extends CallOptions {
  checkpointNs?: string;
  channels?: string[];
  omitValues?: boolean;
  knownRoots?: Record<string, Uint8Array>;
  includePendingWrites?: boolean;
  /** The schema version this code understands: values stored under a registered schema at another version come back
   * migrated (docs/lifecycle.md; `migration` says how; a FAIL policy rejects with FailedPrecondition). 0: as stored. */
  readSchemaVersion?: number;
}

export interface ListCheckpointsOptions extends CallOptions {
  checkpointNs?: string;
  metadataFilter?: Record<string, unknown>;
  before?: string;
  limit?: number;
  pageSize?: number;
  includeValues?: boolean;
  includePendingWrites?: boolean;
  /** With includeValues: each checkpoint's values migrated to this version of its schema (as getCheckpoint). */
  readSchemaVersion?: number;
}

/** The decoded channel values of a Checkpoint (channels without content are skipped). */
export function checkpointValues(cp: Checkpoint | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [name, cv] of Object.entries(cp?.channels ?? {})) {
    if (cv.content.case === "value") {
      Object.defineProperty(out, name, { value: fromValue(cv.content.value), enumerable: true, writable: true, configurable: true });
    }
  }
  return out;
}

export class Client {
  readonly address: string;
  readonly namespace: string;
  readonly timeoutMs: number;
  readonly grpcClient: grpc.Client;
  readonly threads: Stub<typeof ThreadService extends GenService<infer S> ? S : never>;
  readonly admin: Stub<typeof AdminService extends GenService<infer S> ? S : never>;
  readonly runs: Stub<typeof RunService extends GenService<infer S> ? S : never>;
  readonly events: Stub<typeof EventService extends GenService<infer S> ? S : never>;
  readonly effects: Stub<typeof EffectService extends GenService<infer S> ? S : never>;
  readonly artifacts: Stub<typeof ArtifactService extends GenService<infer S> ? S : never>;
  /** The ConversationService calls (conversations.ts). */
  readonly conversations: Conversations;
  /** MemoryService calls (memory.ts): put, get, delete, search, batch, listNamespaces, history, sweep. */
  readonly memory: Memory;
  /** SchemaService calls (schemas.ts): register, get, list, migrateThread, migrateNamespace. */
  readonly schemas: Schemas;
  /** TransferService calls (transfer.ts): exportNamespace, importNamespace. */
  readonly transfer: Transfer;
  private readonly policy: RetryPolicy;
  private readonly autoRequestId: boolean;
  private readonly waitForReady?: boolean;
  private readonly connectOwn: () => grpc.Client;
  private readonly streamClients = new Map<grpc.Client, AbortController>();
  private closed = false;

  /** `address` is `unix:PATH` (relative or absolute) or `HOST:PORT`. */
  constructor(address: string = DEFAULT_ADDRESS, opts: ClientOptions = {}) {
    this.address = address;
    this.namespace = opts.namespace ?? "default";
    this.timeoutMs = opts.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.policy = { ...DEFAULT_RETRY, ...opts.retry };
    this.autoRequestId = opts.autoRequestId ?? true;
    this.waitForReady = opts.waitForReady;
    this.grpcClient = connect(address, opts.credentials, opts.channelOptions, { token: opts.token, tls: opts.tls });
    this.connectOwn = () => connect(address, opts.credentials, { ...opts.channelOptions, ...OWN_CONNECTION },
                                    { token: opts.token, tls: opts.tls });
    this.threads = this.stub(ThreadService);
    this.admin = this.stub(AdminService);
    this.runs = this.stub(RunService);
    this.events = this.stub(EventService);
    this.effects = this.stub(EffectService);
    this.artifacts = this.stub(ArtifactService);
    this.conversations = new Conversations(this);
    this.memory = new Memory(this.stub(MemoryService), this.namespace);
    this.schemas = new Schemas(this.stub(SchemaService), this.namespace);
    this.transfer = new Transfer(this.stub(TransferService), this.grpcClient, this.namespace);
  }

  /** A typed stub of any generated service on this client's channel (client-streaming methods are left out). */
  stub<S extends GenServiceMethods>(service: GenService<S>): Stub<S> {
    return stub(this.grpcClient, service, {
      timeoutMs: this.timeoutMs,
      policy: this.policy,
      autoRequestId: this.autoRequestId,
      waitForReady: this.waitForReady,
      ownConnection: () => this.openStreamConnection(),
    });
  }

  /**
   * A channel like this client's (address, credentials, token, options) on a connection of its own, for a
   * long-lived stream (a follow watch): `release()` closes it; `close()` closes any still open. The
   * sidecar allows a connection 3 streams at once by default, so an open watch on the client's channel
   * would take one of the slots every other call needs.
   */
  openStreamConnection(): OwnConnection {
    if (this.closed) throw new TypeError("the client is closed");
    const client = this.connectOwn();
    const abort = new AbortController();
    this.streamClients.set(client, abort);
    return { client, signal: abort.signal, release: () => { if (this.streamClients.delete(client)) client.close(); } };
  }

  /** How many stream connections are open now. */
  get streamConnections(): number {
    return this.streamClients.size;
  }

  // ------------------------------------------------------------ runs

  /**
   * Create a run and hold it (CreateRun with claim): a HeldRun when the run became active at once;
   * else it is claimed when its turn comes, waiting up to `waitMs` (FailedPrecondition RUN_NOT_ACTIVE after).
   */
  async startRun(
    threadId: string,
    req: Omit<RequestFields<typeof CreateRunRequestSchema>, "namespace" | "threadId" | "claim"> = {},
    opts: CallOptions & { waitMs?: number } = {},
  ): Promise<HeldRun> {
    const resp = await this.runs.createRun({ ...req, namespace: this.namespace, threadId, claim: true }, opts);
    if (resp.lease) return new HeldRun(this, resp.run!, resp.lease);
    return this.claimRun({ runId: resp.run!.runId }, opts);
  }

  /** ClaimRun (by run id, or the active run of a thread), waiting up to `waitMs` for its turn. */
  async claimRun(
    req: Omit<RequestFields<typeof ClaimRunRequestSchema>, "namespace" | "waitTimeout">,
    opts: CallOptions & { waitMs?: number } = {},
  ): Promise<HeldRun> {
    const waitMs = opts.waitMs ?? 0;
    const waitTimeout = waitMs ? { seconds: BigInt(Math.floor(waitMs / 1000)), nanos: (waitMs % 1000) * 1e6 } : undefined;
    const timeoutMs = opts.timeoutMs ?? Math.max(this.timeoutMs, waitMs + 10000);
    const resp = await this.runs.claimRun({ ...req, namespace: this.namespace, waitTimeout }, { ...opts, timeoutMs });
    return new HeldRun(this, resp.run!, resp.lease!);
  }

  /** Resumable watch over any server stream; see rpc.resumable. */
  watch<O>(open: (last: O | undefined) => AsyncIterable<O>, signal?: AbortSignal): AsyncGenerator<O, void, undefined> {
    return resumable(open, { policy: this.policy, signal });
  }

  /** Wait until the channel is connected (or throw after timeoutMs). */
  waitReady(timeoutMs = 10000): Promise<void> {
    return new Promise((resolve, reject) =>
      this.grpcClient.waitForReady(new Date(Date.now() + timeoutMs), (err) => (err ? reject(err) : resolve())),
    );
  }

  close(): void {
    this.closed = true;
    for (const [c, abort] of this.streamClients) {
      abort.abort(); // grpc-js's close waits for open calls: cancel them
      c.close();
    }
    this.streamClients.clear();
    this.grpcClient.close();
  }

  private rid(given: string | undefined): string {
    return given ?? (this.autoRequestId ? randomUUID() : "");
  }

  // ------------------------------------------------------------ threads

  async createThread(
    threadId = "",
    opts: CallOptions & { metadata?: Record<string, unknown>; ifExists?: IfExistsPolicy; requestId?: string } = {},
  ): Promise<Thread> {
    const resp = await this.threads.createThread(
      {
        namespace: this.namespace,
        threadId,
        metadata: encodeMap(opts.metadata, "metadata"),
        ifExists: IF_EXISTS[opts.ifExists ?? "error"],
        requestId: this.rid(opts.requestId),
      },
      opts,
    );
    return resp.thread!;
  }

  async getThread(threadId: string, opts: CallOptions = {}): Promise<Thread> {
    return (await this.threads.getThread({ namespace: this.namespace, threadId }, opts)).thread!;
  }

  async *listThreads(
    opts: CallOptions & { metadataFilter?: Record<string, unknown>; pageSize?: number } = {},
  ): AsyncGenerator<Thread, void, undefined> {
    let pageToken = "";
    const metadataFilter = encodeMap(opts.metadataFilter, "metadata_filter");
    do {
      const resp = await this.threads.listThreads(
        { namespace: this.namespace, metadataFilter, pageSize: opts.pageSize ?? 0, pageToken },
        opts,
      );
      yield* resp.threads;
      pageToken = resp.nextPageToken;
    } while (pageToken);
  }

  async updateThread(
    threadId: string,
    opts: CallOptions & {
      setMetadata?: Record<string, unknown>;
      removeKeys?: string[];
      replace?: boolean;
      etag?: string;
      requestId?: string;
    } = {},
  ): Promise<Thread> {
    const resp = await this.threads.updateThread(
      {
        namespace: this.namespace,
        threadId,
        setMetadata: encodeMap(opts.setMetadata, "set_metadata"),
        removeMetadataKeys: opts.removeKeys ?? [],
        replaceMetadata: opts.replace ?? false,
        etag: opts.etag ?? "",
        requestId: this.rid(opts.requestId),
      },
      opts,
    );
    return resp.thread!;
  }

  async deleteThread(
    threadId: string,
    opts: CallOptions & { allowMissing?: boolean; etag?: string; requestId?: string } = {},
  ): Promise<DeleteThreadResponse> {
    return this.threads.deleteThread(
      {
        namespace: this.namespace,
        threadId,
        allowMissing: opts.allowMissing ?? false,
        etag: opts.etag ?? "",
        requestId: this.rid(opts.requestId),
      },
      opts,
    );
  }

  async copyThread(
    sourceThreadId: string,
    targetThreadId: string,
    opts: CallOptions & { metadata?: Record<string, unknown>; replaceMetadata?: boolean; requestId?: string } = {},
  ): Promise<CopyThreadResponse> {
    return this.threads.copyThread(
      {
        namespace: this.namespace,
        sourceThreadId,
        targetThreadId,
        metadata: encodeMap(opts.metadata, "metadata"),
        replaceMetadata: opts.replaceMetadata ?? false,
        requestId: this.rid(opts.requestId),
      },
      opts,
    );
  }

  // ------------------------------------------------------------ checkpoints

  /** Store a checkpoint. Channel values are JavaScript values or Append / SetKeys / KEEP deltas. */
  async putCheckpoint(threadId: string, channels: Record<string, unknown>, opts: PutCheckpointOptions = {}): Promise<PutCheckpointResponse> {
    const writes: Record<string, ReturnType<typeof channelWrite>> = {};
    for (const [name, v] of Object.entries(channels)) writes[name] = channelWrite(v, `channels['${name}']`);
    return this.threads.putCheckpoint(
      {
        namespace: this.namespace,
        threadId,
        checkpointNs: opts.checkpointNs ?? "",
        // an id made here makes the put idempotent by id: retried without a request_id; with the
        // caller's own request_id (which it may resend itself) the server names the checkpoint
        checkpointId: opts.checkpointId || (opts.requestId ? "" : newId()),
        parentCheckpointId: opts.parentId ?? "",
        baseCheckpointId: opts.baseId ?? "",
        metadata: encodeMap(opts.metadata, "metadata"),
        channels: writes,
        extra: opts.extra === undefined ? undefined : encodeField(opts.extra, "extra"),
        expectedHeadEtag: opts.expectedHeadEtag,
        schema: opts.schema ?? "",
        schemaVersion: opts.schemaVersion ?? 0,
        requireThread: opts.requireThread ?? false,
        requestId: opts.requestId ?? "",
        runId: opts.runId ?? "",
        leaseId: opts.leaseId ?? "",
        steps: opts.steps ?? [],
        events: opts.events ?? [],
        effects: opts.effects ?? [],
      },
      opts,
    );
  }

  async putWrites(
    threadId: string,
    checkpointId: string,
    writes: PendingWriteInput[],
    opts: CallOptions & { checkpointNs?: string; requestId?: string } = {},
  ): Promise<PutWritesResponse> {
    return this.threads.putWrites(
      {
        namespace: this.namespace,
        threadId,
        checkpointNs: opts.checkpointNs ?? "",
        checkpointId,
        writes: writes.map((w, i) => ({
          taskId: w.taskId,
          idx: w.idx,
          channel: w.channel,
          value: encodeField(w.value, `writes[${i}].value`),
          taskPath: w.taskPath ?? "",
          replace: w.replace ?? false,
        })),
        requestId: opts.requestId ?? "", // idempotent per (task id, idx): no request record needed
      },
      opts,
    );
  }

  async getCheckpoint(threadId: string, checkpointId = "", opts: GetCheckpointOptions = {}): Promise<Checkpoint> {
    const resp = await this.threads.getCheckpoint(
      {
        namespace: this.namespace,
        threadId,
        checkpointNs: opts.checkpointNs ?? "",
        checkpointId,
        channels: opts.channels ?? [],
        omitValues: opts.omitValues ?? false,
        knownRoots: opts.knownRoots ?? {},
        includePendingWrites: opts.includePendingWrites ?? false,
        readSchemaVersion: opts.readSchemaVersion ?? 0,
      },
      opts,
    );
    return resp.checkpoint!;
  }

  /** The decoded channel values of a checkpoint (the latest by default). */
  async getValues(threadId: string, checkpointId = "", opts: GetCheckpointOptions = {}): Promise<Record<string, unknown>> {
    return checkpointValues(await this.getCheckpoint(threadId, checkpointId, opts));
  }

  async *listCheckpoints(threadId = "", opts: ListCheckpointsOptions = {}): AsyncGenerator<Checkpoint, void, undefined> {
    let pageToken = "";
    const metadataFilter = encodeMap(opts.metadataFilter, "metadata_filter");
    do {
      const resp = await this.threads.listCheckpoints(
        {
          namespace: this.namespace,
          threadId,
          checkpointNs: opts.checkpointNs,
          metadataFilter,
          beforeCheckpointId: opts.before ?? "",
          limit: opts.limit ?? 0,
          pageSize: opts.pageSize ?? 0,
          pageToken,
          includeValues: opts.includeValues ?? false,
          includePendingWrites: opts.includePendingWrites ?? false,
          readSchemaVersion: opts.readSchemaVersion ?? 0,
        },
        opts,
      );
      yield* resp.checkpoints;
      pageToken = resp.nextPageToken;
    } while (pageToken);
  }

  async prune(
    threadIds: string[],
    opts: CallOptions & { keepLatest?: number; olderThan?: Date; deleteAll?: boolean; checkpointNs?: string; requestId?: string },
  ): Promise<bigint> {
    const policy =
      opts.keepLatest !== undefined
        ? { case: "keepLatest" as const, value: opts.keepLatest }
        : opts.olderThan !== undefined
          ? { case: "olderThan" as const, value: timestampFromDate(opts.olderThan) }
          : opts.deleteAll
            ? { case: "deleteAll" as const, value: true }
            : { case: undefined };
    const resp = await this.threads.pruneCheckpoints(
      { namespace: this.namespace, threadIds, checkpointNs: opts.checkpointNs, policy, requestId: this.rid(opts.requestId) },
      opts,
    );
    return resp.deletedCheckpoints;
  }

  async deleteForRuns(runIds: string[], opts: CallOptions & { requestId?: string } = {}): Promise<bigint> {
    const resp = await this.threads.deleteCheckpointsForRuns(
      { namespace: this.namespace, runIds, requestId: this.rid(opts.requestId) },
      opts,
    );
    return resp.deletedCheckpoints;
  }

  async diff(
    threadId: string,
    fromCheckpointId: string,
    toCheckpointId: string,
    opts: CallOptions & {
      checkpointNs?: string;
      /** Both checkpoints compared as read at this version of their schema (DiffCheckpointsRequest). */
      readSchemaVersion?: number;
    } = {},
  ): Promise<ChannelChange[]> {
    const resp = await this.threads.diffCheckpoints(
      { namespace: this.namespace, threadId, checkpointNs: opts.checkpointNs ?? "", fromCheckpointId, toCheckpointId,
        readSchemaVersion: opts.readSchemaVersion ?? 0 },
      opts,
    );
    return resp.changes;
  }

  // ------------------------------------------------------------ admin

  async storeStats(opts: CallOptions = {}): Promise<GetStoreStatsResponse> {
    return this.admin.getStoreStats({}, opts);
  }

  async collectGarbage(opts: CallOptions = {}): Promise<CollectGarbageResponse> {
    return this.admin.collectGarbage({}, opts);
  }

  async checkIntegrity(opts: CallOptions = {}): Promise<CheckIntegrityResponse> {
    return this.admin.checkIntegrity({}, opts);
  }

  /** An online backup into the sidecar's backup directory, named `name` (default: backup-<UTC time>). */
  async backupStore(name?: string, opts: CallOptions = {}): Promise<BackupStoreResponse> {
    return this.admin.backupStore({ name: name || backupName() }, opts);
  }

  // ------------------------------------------------------------ resume (schema NEW_RUN policy)

  /**
   * ThreadService.ResumeThread: the latest checkpoint of `threadId` read at `readSchemaVersion`, and when the
   * schema's NEW_RUN policy fell back to an older checkpoint (`checkpoint.migration` NEW_RUN), the run the
   * server created from it in the same transaction (`run`; its metadata links it to the chain that did not
   * migrate: new_run_from, schema, schema_version, reason) and, when it was claimed (`run.claim`, default
   * true), that run held (`held`). Retried with a request id (filled in unless given).
   */
  async resumeThread(
    threadId: string,
    readSchemaVersion: number,
    opts: CallOptions & {
      checkpointNs?: string;
      includePendingWrites?: boolean;
      requestId?: string;
      run?: Omit<RequestFields<typeof CreateRunRequestSchema>, "namespace" | "threadId" | "checkpointNs" | "startCheckpointId" | "requestId">;
    } = {},
  ): Promise<{ checkpoint: Checkpoint; run?: CreateRunResponse; held?: HeldRun }> {
    const resp = await this.threads.resumeThread({
      namespace: this.namespace, threadId, checkpointNs: opts.checkpointNs ?? "", readSchemaVersion,
      includePendingWrites: opts.includePendingWrites ?? false, requestId: this.rid(opts.requestId),
      run: { claim: true, ...opts.run },
    }, opts);
    const run = resp.run;
    return { checkpoint: resp.checkpoint!, run, held: run?.lease ? new HeldRun(this, run.run!, run.lease) : undefined };
  }
}

/** backup-<UTC time>: the name of a backup the caller did not name. */
export function backupName(now: Date = new Date()): string {
  return "backup-" + now.toISOString().replace(/[-:]/g, "").replace(/\.\d+Z$/, "Z");
}

export { decodeMap };
