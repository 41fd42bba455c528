/**
 * A LangGraph.js checkpointer (`BaseCheckpointSaver`) backed by the Agent State Sidecar.
 *
 *   import { SidecarSaver } from "@agentstate/client/langgraph";
 *   const checkpointer = new SidecarSaver({ address: "unix:sidecar-data/sidecar.sock" });
 *   const graph = builder.compile({ checkpointer });
 *
 * How LangGraph state maps onto agentstate.v1 (the same layout as the Python adapter):
 *   thread_id / checkpoint_ns / checkpoint id / parent  -> the same fields of a sidecar checkpoint
 *   metadata            -> checkpoint metadata, one structured Value per key (so `list({ filter })`
 *                          is answered by the server); a key the encoding cannot hold is stored as
 *                          opaque serde bytes
 *   channel values      -> one channel each, as the serde's `(type, bytes)` pair (opaque); a channel
 *                          whose value is an array (a message list) is stored element-wise: a list of
 *                          opaque items, one blob per element. When the parent checkpoint's list is a
 *                          prefix of the new one, only the new items are sent: a ValueDelta append
 *                          (keep_first = common prefix) with base_root = the parent's root, falling
 *                          back to the whole value when the server answers FAILED_PRECONDITION
 *                          BASE_MISMATCH (a stale cache, another writer).
 *   channels not in `newVersions` -> `keep` (taken from the parent) when the parent holds the same
 *                          version; otherwise not stored (the contract of `put`: only channels
 *                          that changed are written)
 *   v, ts, channel_versions, versions_seen (and any other checkpoint field) -> `extra`
 *   pending writes      -> PutWrites (task id, idx, channel, value, task path): an array value as a
 *                          list of opaque serde items (stored as a list tree sharing its items with the
 *                          channel list it extends), any other value as one opaque serde value; special
 *                          writes (errors, interrupts: negative idx) replace, others are kept
 */
import { createHash } from "node:crypto";
import type { RunnableConfig } from "@langchain/core/runnables";
import {
  BaseCheckpointSaver,
  TASKS,
  WRITES_IDX_MAP,
  maxChannelVersion,
  compareWritesSortKeys,
  writesSortKey,
  type ChannelVersions,
  type Checkpoint,
  type CheckpointListOptions,
  type CheckpointMetadata,
  type CheckpointPendingWrite,
  type CheckpointTuple,
  type PendingWrite,
  type SerializerProtocol,
} from "@langchain/langgraph-checkpoint";
import { Client, type ClientOptions } from "./client.js";
import { Opaque, UnsupportedValue, encode } from "./codec.js";
import { AgentStateError, Status } from "./errors.js";
import { Append, KEEP, fromValue } from "./values.js";
import type { Checkpoint as PbCheckpoint } from "./gen/agentstate/v1/threads_pb.js";

/** The extra key of a metadata value stored as serde bytes (not structured). */
const SERDE_TYPE = "langgraph.serde";

export interface SidecarSaverOptions extends ClientOptions {
  /** `unix:PATH` or `HOST:PORT` (default unix:sidecar-data/sidecar.sock). Ignored when `client` is given. */
  address?: string;
  /** Use this client (its namespace is the tenant) instead of opening one. */
  client?: Client;
  /** LangGraph serializer (default: the base class's JsonPlusSerializer). */
  serde?: SerializerProtocol;
  /** How many recent checkpoints' list digests to remember for append deltas (default 256). */
  cacheSize?: number;
}

interface ChannelCache {
  root: Uint8Array;
  version: unknown;
  /** Digests of the serialized items when the value is a list. */
  items?: string[];
}

/** Counters of how channel values were sent, for tests and monitoring. */
export interface SaverStats {
  whole: number;
  appended: number;
  kept: number;
  baseMismatchRetries: number;
}

function digest(type: string, data: Uint8Array): string {
  return createHash("sha256").update(type).update("\0").update(data).digest("base64");
}

function commonPrefix(a: string[], b: string[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

export class SidecarSaver extends BaseCheckpointSaver {
  readonly client: Client;
  readonly stats: SaverStats = { whole: 0, appended: 0, kept: 0, baseMismatchRetries: 0 };
  private readonly ownClient: boolean;
  private readonly cache = new Map<string, Map<string, ChannelCache>>();
  private readonly cacheSize: number;

  constructor(opts: SidecarSaverOptions = {}) {
    super(opts.serde);
    this.ownClient = !opts.client;
    // Checkpoint puts (with ids) and pending writes are idempotent by themselves: no request ids needed.
    this.client = opts.client ?? new Client(opts.address, { autoRequestId: false, ...opts });
    this.cacheSize = opts.cacheSize ?? 256;
  }

  /** Close the client when the saver opened it. */
  close(): void {
    if (this.ownClient) this.client.close();
  }

  // ------------------------------------------------------------ encoding

  private async serialize(value: unknown): Promise<Opaque> {
    const [type, data] = await this.serde.dumpsTyped(value);
    return new Opaque(type, data);
  }

  private async deserialize(v: unknown): Promise<unknown> {
    if (v instanceof Opaque) return this.serde.loadsTyped(v.type, v.data);
    if (Array.isArray(v)) return Promise.all(v.map((x) => this.deserialize(x)));
    return v;
  }

  private async encodeMetadata(metadata: Record<string, unknown>): Promise<Record<string, unknown>> {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(metadata)) {
      if (v === undefined) continue;
      try {
        encode(v);
        out[k] = v;
      } catch (e) {
        if (!(e instanceof UnsupportedValue)) throw e;
        const [type, data] = await this.serde.dumpsTyped(v);
        out[k] = new Opaque(`${SERDE_TYPE}:${type}`, data);
      }
    }
    return out;
  }

  private async decodeMetadata(entries: PbCheckpoint["metadata"]): Promise<CheckpointMetadata> {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(entries)) {
      const x = fromValue(v);
      out[k] = x instanceof Opaque && x.type.startsWith(`${SERDE_TYPE}:`)
        ? await this.serde.loadsTyped(x.type.slice(SERDE_TYPE.length + 1), x.data)
        : plain(x);
    }
    return out as CheckpointMetadata;
  }

  // ------------------------------------------------------------ reads

  private async toTuple(cp: PbCheckpoint): Promise<CheckpointTuple> {
    const extra = (cp.extra ? plain(fromValue(cp.extra)) : {}) as Record<string, unknown>;
    const channelValues: Record<string, unknown> = {};
    for (const [name, cv] of Object.entries(cp.channels)) {
      if (cv.content.case === "value") channelValues[name] = await this.deserialize(fromValue(cv.content.value));
    }
    const writes = [...cp.pendingWrites].sort((a, b) =>
      compareWritesSortKeys(writesSortKey(a.taskPath, a.taskId, a.idx), writesSortKey(b.taskPath, b.taskId, b.idx)),
    );
    const pendingWrites: CheckpointPendingWrite[] = await Promise.all(
      writes.map(async (w) => [w.taskId, w.channel, await this.deserialize(fromValue(w.value))] as CheckpointPendingWrite),
    );
    const checkpoint = { ...extra, id: cp.checkpointId, channel_values: channelValues } as unknown as Checkpoint;
    if (((extra.v as number | undefined) ?? 4) < 4 && cp.parentCheckpointId) await this.migratePendingSends(checkpoint, cp);
    const tuple: CheckpointTuple = {
      config: { configurable: { thread_id: cp.threadId, checkpoint_ns: cp.checkpointNs, checkpoint_id: cp.checkpointId } },
      checkpoint,
      metadata: await this.decodeMetadata(cp.metadata),
      pendingWrites,
    };
    if (cp.parentCheckpointId) {
      tuple.parentConfig = {
        configurable: { thread_id: cp.threadId, checkpoint_ns: cp.checkpointNs, checkpoint_id: cp.parentCheckpointId },
      };
    }
    return tuple;
  }

  /** Checkpoints before format 4 kept pending sends as writes of the parent: move them into the TASKS channel. */
  private async migratePendingSends(checkpoint: Checkpoint, cp: PbCheckpoint): Promise<void> {
    const parent = await this.client.getCheckpoint(cp.threadId, cp.parentCheckpointId, {
      checkpointNs: cp.checkpointNs,
      omitValues: true,
      includePendingWrites: true,
    });
    const sends = parent.pendingWrites
      .filter((w) => w.channel === TASKS)
      .sort((a, b) => compareWritesSortKeys(writesSortKey(a.taskPath, a.taskId, a.idx), writesSortKey(b.taskPath, b.taskId, b.idx)));
    checkpoint.channel_values[TASKS] = await Promise.all(sends.map((w) => this.deserialize(fromValue(w.value))));
    checkpoint.channel_versions ??= {};
    const versions = Object.values(checkpoint.channel_versions);
    checkpoint.channel_versions[TASKS] = versions.length > 0 ? maxChannelVersion(...versions) : this.getNextVersion(undefined);
  }

  async getTuple(config: RunnableConfig): Promise<CheckpointTuple | undefined> {
    const c = config.configurable ?? {};
    const threadId = c.thread_id;
    if (threadId === undefined || threadId === null) return undefined;
    const checkpointId: string = c.checkpoint_id ?? c.thread_ts ?? "";
    try {
      const cp = await this.client.getCheckpoint(String(threadId), checkpointId, {
        checkpointNs: c.checkpoint_ns ?? "",
        includePendingWrites: true,
      });
      return await this.toTuple(cp);
    } catch (e) {
      if (e instanceof AgentStateError && e.code === Status.NOT_FOUND) return undefined;
      throw e;
    }
  }

  async *list(config: RunnableConfig, options?: CheckpointListOptions): AsyncGenerator<CheckpointTuple> {
    const c = config.configurable ?? {};
    const { limit, before, filter } = options ?? {};
    if (limit !== undefined && limit <= 0) return;
    const threadId = c.thread_id === undefined || c.thread_id === null ? "" : String(c.thread_id);
    let metadataFilter: Record<string, unknown> | undefined;
    if (filter) {
      metadataFilter = {};
      for (const [k, v] of Object.entries(filter)) {
        if (v === undefined) continue;
        try {
          encode(v);
          metadataFilter[k] = v;
        } catch (e) {
          if (!(e instanceof UnsupportedValue)) throw e;
          return; // no stored structured metadata can equal a value the encoding cannot hold
        }
      }
    }
    if (c.checkpoint_id) {
      // One checkpoint, if it passes the filters.
      const tuple = await this.getTuple(config);
      if (!tuple) return;
      if (before?.configurable?.checkpoint_id && tuple.checkpoint.id >= before.configurable.checkpoint_id) return;
      const md = (tuple.metadata ?? {}) as Record<string, unknown>;
      if (metadataFilter && !Object.entries(metadataFilter).every(([k, v]) => sameValue(md[k], v))) return;
      yield tuple;
      return;
    }
    const iter = this.client.listCheckpoints(threadId, {
      checkpointNs: c.checkpoint_ns,
      metadataFilter,
      before: before?.configurable?.checkpoint_id ?? "",
      limit: limit ?? 0,
      includeValues: true,
      includePendingWrites: true,
    });
    for await (const cp of iter) yield await this.toTuple(cp);
  }

  // ------------------------------------------------------------ writes

  private cacheKey(threadId: string, ns: string, checkpointId: string): string {
    return JSON.stringify([this.client.namespace, threadId, ns, checkpointId]);
  }

  private remember(key: string, channels: Map<string, ChannelCache>): void {
    this.cache.delete(key);
    this.cache.set(key, channels);
    while (this.cache.size > this.cacheSize) this.cache.delete(this.cache.keys().next().value!);
  }

  /** What the parent checkpoint holds: from the cache, else its roots and versions from the server. */
  private async parentChannels(threadId: string, ns: string, parentId: string): Promise<Map<string, ChannelCache> | undefined> {
    const cached = this.cache.get(this.cacheKey(threadId, ns, parentId));
    if (cached) return cached;
    let cp: PbCheckpoint;
    try {
      cp = await this.client.getCheckpoint(threadId, parentId, { checkpointNs: ns, omitValues: true });
    } catch (e) {
      if (e instanceof AgentStateError && e.code === Status.NOT_FOUND) return undefined;
      throw e;
    }
    const extra = (cp.extra ? plain(fromValue(cp.extra)) : {}) as { channel_versions?: Record<string, unknown> };
    const out = new Map<string, ChannelCache>();
    for (const [name, cv] of Object.entries(cp.channels)) {
      if (cv.root.length) out.set(name, { root: cv.root, version: extra.channel_versions?.[name] });
    }
    return out;
  }

  async put(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    newVersions: ChannelVersions,
  ): Promise<RunnableConfig> {
    const c = config.configurable ?? {};
    if (c.thread_id === undefined || c.thread_id === null) {
      throw new Error('Failed to put checkpoint: the RunnableConfig has no "thread_id" in its "configurable" property.');
    }
    const threadId = String(c.thread_id);
    const ns: string = c.checkpoint_ns ?? "";
    const parentId: string = c.checkpoint_id ?? "";
    const { id, channel_values: channelValues, ...rest } = checkpoint;
    const parent = parentId ? await this.parentChannels(threadId, ns, parentId) : undefined;

    // Serialize every channel; lists element by element.
    const serialized = new Map<string, { whole: unknown; items?: Opaque[]; digests?: string[] }>();
    for (const [name, value] of Object.entries(channelValues ?? {})) {
      if (Array.isArray(value)) {
        const items = await Promise.all(value.map((x) => this.serialize(x)));
        serialized.set(name, { whole: items, items, digests: items.map((o) => digest(o.type, o.data)) });
      } else {
        serialized.set(name, { whole: await this.serialize(value) });
      }
    }
    const versions = (rest as { channel_versions?: Record<string, unknown> }).channel_versions ?? {};
    const md = await this.encodeMetadata(metadata as Record<string, unknown>);
    const extra = plainForExtra(rest);

    const build = (useDeltas: boolean) => {
      const channels: Record<string, unknown> = {};
      const how = { whole: 0, appended: 0, kept: 0 };
      for (const [name, s] of serialized) {
        if (!(name in newVersions)) {
          // Unchanged: the parent's value, when the parent holds this version; otherwise not stored.
          const held = parent?.get(name);
          if (held && held.version === versions[name]) {
            channels[name] = KEEP;
            how.kept++;
          }
          continue;
        }
        const prev = useDeltas ? parent?.get(name) : undefined;
        if (prev?.items && s.digests && prev.items.length > 0) {
          const keep = commonPrefix(prev.items, s.digests);
          channels[name] = new Append(s.items!.slice(keep), { keepFirst: keep, baseRoot: prev.root });
          how.appended++;
        } else {
          channels[name] = s.whole;
          how.whole++;
        }
      }
      return { channels, how };
    };

    const send = (channels: Record<string, unknown>) =>
      this.client.putCheckpoint(threadId, channels, {
        checkpointId: id,
        parentId,
        checkpointNs: ns,
        metadata: md,
        extra,
        schemaVersion: (rest as { v?: number }).v ?? 0,
      });

    let attempt = build(true);
    let resp;
    try {
      resp = await send(attempt.channels);
    } catch (e) {
      if (!(e instanceof AgentStateError && e.code === Status.FAILED_PRECONDITION && e.reason === "BASE_MISMATCH")) throw e;
      this.stats.baseMismatchRetries++;
      attempt = build(false);
      resp = await send(attempt.channels);
    }
    this.stats.whole += attempt.how.whole;
    this.stats.appended += attempt.how.appended;
    this.stats.kept += attempt.how.kept;

    const roots = resp.checkpoint?.channels ?? {};
    const remembered = new Map<string, ChannelCache>();
    for (const [name, s] of serialized) {
      const root = roots[name]?.root;
      if (root && root.length && name in attempt.channels) remembered.set(name, { root, version: versions[name], items: s.digests });
    }
    this.remember(this.cacheKey(threadId, ns, id), remembered);
    return { configurable: { thread_id: threadId, checkpoint_ns: ns, checkpoint_id: id } };
  }

  async putWrites(config: RunnableConfig, writes: PendingWrite[], taskId: string, taskPath = ""): Promise<void> {
    const c = config.configurable ?? {};
    if (c.thread_id === undefined || c.thread_id === null) {
      throw new Error('Failed to put writes: the RunnableConfig has no "thread_id" in its "configurable" property.');
    }
    if (!c.checkpoint_id) throw new Error('Failed to put writes: the RunnableConfig has no "checkpoint_id".');
    const items = await Promise.all(
      writes.map(async ([channel, value], i) => ({
        taskId,
        idx: WRITES_IDX_MAP[channel] ?? i,
        channel,
        // an array item by item: the sidecar stores it as a list tree, so its items are the very nodes
        // of the channel list the write extends
        value: Array.isArray(value) ? await Promise.all(value.map((x) => this.serialize(x))) : await this.serialize(value),
        taskPath,
        replace: channel in WRITES_IDX_MAP,
      })),
    );
    await this.client.putWrites(String(c.thread_id), c.checkpoint_id, items, { checkpointNs: c.checkpoint_ns ?? "" });
  }

  async deleteThread(threadId: string): Promise<void> {
    await this.client.deleteThread(threadId, { allowMissing: true });
    const prefix = JSON.stringify([this.client.namespace, threadId]).slice(0, -1) + ",";
    for (const key of [...this.cache.keys()]) if (key.startsWith(prefix)) this.cache.delete(key);
  }
}

/** A decoded structured value as LangGraph expects plain JSON-ish data: Float -> number. */
function plain(v: unknown): unknown {
  if (v === null || typeof v !== "object") return v;
  if (Array.isArray(v)) return v.map(plain);
  if (v.constructor?.name === "Float") return (v as { value: number }).value;
  if (Object.getPrototypeOf(v) === Object.prototype) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) Object.defineProperty(out, k, { value: plain(x), enumerable: true, writable: true, configurable: true });
    return out;
  }
  return v;
}

/** Checkpoint fields for `extra`, with undefined entries dropped (they do not survive storage). */
function plainForExtra(rest: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(rest)) if (v !== undefined) out[k] = v;
  return out;
}

function sameValue(a: unknown, b: unknown): boolean {
  try {
    const x = encode(a);
    const y = encode(b);
    return x.length === y.length && x.every((byte, i) => byte === y[i]);
  } catch {
    return false;
  }
}
