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
 *   channel values      -> one channel each, every channel the checkpoint has a value for (whatever its
 *                          version, whatever `newVersions` says) and no other: what `put` is given is
 *                          what a later read returns. A value is the serde's `(type, bytes)` pair (opaque);
 *                          an array (a message list) is stored element-wise: a list of opaque items, one
 *                          blob per element.
 *   what is sent        -> every value is serialized at the call and fingerprinted (sha256 of the bytes,
 *                          per item for arrays). The saver remembers, for recently stored or read
 *                          checkpoints, each channel's root and fingerprints. Relative to a known base
 *                          (the parent, else the thread's latest known checkpoint, as `base_checkpoint_id`)
 *                          a channel whose bytes the base holds goes as a keep checked against the base's
 *                          root, an array sharing its first k items with the base's as an append
 *                          (keep_first = k, base_root = the base's root), anything else whole. Versions,
 *                          object identity or the cache alone never decide that a value is unchanged. When
 *                          the server answers FAILED_PRECONDITION BASE_MISMATCH (another writer rewrote or
 *                          deleted the base) the saver forgets the thread and sends whole values.
 *   v, ts, channel_versions, versions_seen (and any other checkpoint field) -> `extra`
 *   pending writes      -> PutWrites (task id, idx, channel, value, task path): an array value as a
 *                          list of opaque serde items (stored as a list tree sharing its items with the
 *                          channel list it extends), any other value as one opaque serde value; special
 *                          writes (errors, interrupts: negative idx) replace, others are kept
 */
import * as nodeCrypto from "node:crypto";
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
import { Append, Encoded, Keep, fromValue, invalidValue } from "./values.js";
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
  /** How many recent checkpoints' fingerprints to remember for keeps and append deltas (default 256; 0: none). */
  cacheSize?: number;
}

/** A channel value as a put sends it: one serde blob, or (an array) one blob per item, with fingerprints. */
interface Serialized {
  whole: Opaque | Opaque[];
  /** Fingerprint of the blob (a value that is not an array). */
  fp?: string;
  /** Fingerprints of the items (an array). */
  items?: string[];
}

/**
 * What the saver knows one channel of a stored checkpoint holds: the sidecar's root hash and the
 * fingerprints of the bytes stored under it, both learnt together (a put's request and its reply, or one
 * read). Only a value stored as one serde blob or as a list of serde blobs is known this way.
 */
interface Held {
  root: Uint8Array;
  fp?: string;
  items?: string[];
}

/** What the saver knows of one stored checkpoint, channel by channel (a channel not here is simply unknown). */
type Known = Map<string, Held>;

interface Base {
  id: string;
  known: Known;
}

/** Counters of how channel values were sent, for tests and monitoring. */
export interface SaverStats {
  whole: number;
  appended: number;
  kept: number;
  baseMismatchRetries: number;
}

/** sha256 of the bytes, base64 (one-shot `crypto.hash` where Node has it: 5x faster on small items). */
const sha256: (data: Uint8Array) => string =
  typeof nodeCrypto.hash === "function"
    ? (data) => nodeCrypto.hash("sha256", data, "base64")
    : (data) => nodeCrypto.createHash("sha256").update(data).digest("base64");

/** The fingerprint of a serialized blob: the hash of its bytes (fixed length), then its serde type. */
function fingerprint(o: Opaque): string {
  return sha256(o.data) + o.type;
}

function commonPrefix(a: string[], b: string[]): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/** Whether the base's channel holds exactly the bytes of `s`. */
function holds(held: Held, s: Serialized): boolean {
  if (s.items) return held.items !== undefined && held.items.length === s.items.length && commonPrefix(held.items, s.items) === s.items.length;
  return held.fp !== undefined && held.fp === s.fp;
}

/** What a read of a channel tells about it (its root and the fingerprints of the stored bytes), if anything. */
function heldOf(root: Uint8Array, v: unknown): Held | undefined {
  if (!root.length) return undefined;
  if (v instanceof Opaque) return { root, fp: fingerprint(v) };
  if (Array.isArray(v) && v.every((x) => x instanceof Opaque)) return { root, items: v.map(fingerprint) };
  return undefined;
}

/** The checkpoint's other fields (v, ts, channel_versions, versions_seen...) for `extra`, encoded now. */
function encodeExtra(rest: Record<string, unknown>): Encoded {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(rest)) if (v !== undefined) out[k] = v; // undefined does not survive storage
  try {
    return new Encoded(encode(out));
  } catch (e) {
    throw e instanceof UnsupportedValue ? invalidValue("extra", e) : e;
  }
}

export class SidecarSaver extends BaseCheckpointSaver {
  readonly client: Client;
  readonly stats: SaverStats = { whole: 0, appended: 0, kept: 0, baseMismatchRetries: 0 };
  private readonly ownClient: boolean;
  /**
   * LRU of what recently stored or read checkpoints hold. Never trusted alone: a put keeps or extends a
   * base's value only where its own bytes match the base's fingerprints, and the sidecar checks the root.
   */
  private readonly cache = new Map<string, Known>();
  /** The checkpoint of each (thread, checkpoint namespace) the saver stored or read last. */
  private readonly latest = new Map<string, string>();
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

  private async deserialize(v: unknown): Promise<unknown> {
    if (v instanceof Opaque) return this.serde.loadsTyped(v.type, v.data);
    if (Array.isArray(v)) return Promise.all(v.map((x) => this.deserialize(x)));
    return v;
  }

  /**
   * Metadata key by key, encoded now: a value the agentstate encoding holds as a structured value (so the
   * sidecar can filter on it), anything else as serde bytes.
   */
  private encodeMetadata(metadata: Record<string, unknown>): Promise<Record<string, Encoded | Opaque>> {
    const entries: [string, Encoded | Promise<Opaque>][] = [];
    for (const [k, v] of Object.entries(metadata ?? {})) {
      if (v === undefined) continue;
      try {
        entries.push([k, new Encoded(encode(v))]);
      } catch (e) {
        if (!(e instanceof UnsupportedValue)) throw e;
        entries.push([k, this.dump(v).then((o) => new Opaque(`${SERDE_TYPE}:${o.type}`, o.data))]);
      }
    }
    return Promise.all(entries.map(async ([k, v]) => [k, await v] as const)).then((done) => Object.fromEntries(done));
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

  /** A checkpoint as LangGraph's tuple (fresh objects on every read); `learn` collects what it holds. */
  private async toTuple(cp: PbCheckpoint, learn?: Known): Promise<CheckpointTuple> {
    const extra = (cp.extra ? plain(fromValue(cp.extra)) : {}) as Record<string, unknown>;
    const channelValues: Record<string, unknown> = {};
    for (const [name, cv] of Object.entries(cp.channels)) {
      if (cv.content.case !== "value") continue;
      const v = fromValue(cv.content.value);
      if (learn) {
        const held = heldOf(cv.root, v);
        if (held) learn.set(name, held);
      }
      Object.defineProperty(channelValues, name, { value: await this.deserialize(v), enumerable: true, writable: true, configurable: true });
    }
    const writes = [...cp.pendingWrites].sort((a, b) =>
      compareWritesSortKeys(writesSortKey(a.taskPath, a.taskId, a.idx), writesSortKey(b.taskPath, b.taskId, b.idx)),
    );
    const pendingWrites: CheckpointPendingWrite[] = await Promise.all(
      writes.map(async (w) => [w.taskId, w.channel, await this.deserialize(fromValue(w.value))] as CheckpointPendingWrite),
    );
    // as MemorySaver (copyCheckpoint), a checkpoint always has channel_versions and versions_seen
    const checkpoint = { channel_versions: {}, versions_seen: {}, ...extra, id: cp.checkpointId, channel_values: channelValues } as unknown as Checkpoint;
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
      // What this read returns is what the sidecar holds: a later put (the graph's next step, a fork of it)
      // may keep or extend it.
      const learn: Known | undefined = this.cacheSize > 0 ? new Map() : undefined;
      const tuple = await this.toTuple(cp, learn);
      if (learn) this.remember(cp.threadId, cp.checkpointNs, cp.checkpointId, learn);
      return tuple;
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

  // ------------------------------------------------------------ what the sidecar holds

  private cacheKey(threadId: string, ns: string, checkpointId: string): string {
    return JSON.stringify([this.client.namespace, threadId, ns, checkpointId]);
  }

  private threadKey(threadId: string, ns: string): string {
    return JSON.stringify([this.client.namespace, threadId, ns]);
  }

  /** Remember what a checkpoint holds (after a put or a read); it becomes the thread's latest known one. */
  private remember(threadId: string, ns: string, checkpointId: string, known: Known): void {
    if (this.cacheSize <= 0) return;
    const key = this.cacheKey(threadId, ns, checkpointId);
    this.cache.delete(key);
    this.cache.set(key, known);
    while (this.cache.size > this.cacheSize) this.cache.delete(this.cache.keys().next().value!);
    const tk = this.threadKey(threadId, ns);
    this.latest.delete(tk);
    this.latest.set(tk, checkpointId);
    while (this.latest.size > 4 * this.cacheSize) this.latest.delete(this.latest.keys().next().value!);
  }

  private lookup(threadId: string, ns: string, checkpointId: string): Known | undefined {
    const key = this.cacheKey(threadId, ns, checkpointId);
    const known = this.cache.get(key);
    if (known) {
      this.cache.delete(key);
      this.cache.set(key, known);
    }
    return known;
  }

  /** Forget everything known of a thread (all its checkpoint namespaces). */
  private forget(threadId: string): void {
    const prefix = JSON.stringify([this.client.namespace, threadId]).slice(0, -1) + ",";
    for (const map of [this.cache, this.latest]) {
      for (const key of [...map.keys()]) if (key.startsWith(prefix)) map.delete(key);
    }
  }

  /**
   * The checkpoint a put is sent relative to: its parent when the saver knows what the parent holds,
   * else the thread's latest known checkpoint (a `__copy__` fork names the copied checkpoint's parent,
   * but the saver has just read the copied one). Any checkpoint of the thread serves: a channel is kept or
   * appended to only where its fingerprints prove the base holds the same bytes.
   */
  private baseFor(threadId: string, ns: string, parentId: string): Base | undefined {
    if (this.cacheSize <= 0) return undefined;
    for (const id of [parentId, this.latest.get(this.threadKey(threadId, ns))]) {
      if (!id) continue;
      const known = this.lookup(threadId, ns, id);
      if (known) return { id, known };
    }
    return undefined;
  }

  // ------------------------------------------------------------ writes

  /**
   * Serialize a value now: the serde runs before anything awaits, so what is stored is the value as it
   * is at the call, whatever the caller does with its objects afterwards (MemorySaver serializes in `put`
   * too). A Uint8Array, which the serde hands back as it is, is copied.
   */
  private dump(value: unknown): Promise<Opaque> {
    const v = value instanceof Uint8Array ? new Uint8Array(value) : value;
    return this.serde.dumpsTyped(v).then(([type, data]) => new Opaque(type, data));
  }

  /** Every channel value, serialized now (an array item by item) and fingerprinted. */
  private serializeChannels(values: Record<string, unknown>): Promise<Map<string, Serialized>> {
    const started = Object.entries(values).map(
      ([name, value]) => [name, Array.isArray(value) ? Promise.all(Array.from(value, (x) => this.dump(x))) : this.dump(value)] as const,
    );
    return Promise.all(
      started.map(async ([name, pending]): Promise<[string, Serialized]> => {
        const v = await pending;
        return [name, Array.isArray(v) ? { whole: v, items: v.map(fingerprint) } : { whole: v, fp: fingerprint(v) }];
      }),
    ).then((entries) => new Map(entries));
  }

  /**
   * The channel writes of a put relative to `base` (what the saver knows a checkpoint of the thread
   * holds). Every channel the checkpoint has a value for is written, whatever `newVersions` says:
   * - the base holds the very same bytes (fingerprints of the serialized value, or of every item):
   *   keep, checked against the base's root by the sidecar;
   * - an array whose first k > 0 items are the base's (fingerprints again): append the rest with
   *   keep_first = k, checked against the base's root;
   * - anything else whole.
   */
  private channelWrites(serialized: Map<string, Serialized>, base: Known | undefined) {
    const channels: Record<string, unknown> = {};
    const how = { whole: 0, appended: 0, kept: 0 };
    for (const [name, s] of serialized) {
      const held = base?.get(name);
      if (held && holds(held, s)) {
        channels[name] = new Keep({ baseRoot: held.root });
        if (s.items) s.items = held.items; // one array of fingerprints for both checkpoints
        how.kept++;
        continue;
      }
      const k = held?.items && s.items ? commonPrefix(held.items, s.items) : 0;
      if (k > 0) {
        channels[name] = new Append((s.whole as Opaque[]).slice(k), { keepFirst: k, baseRoot: held!.root });
        s.items = held!.items!.slice(0, k).concat(s.items!.slice(k));
        how.appended++;
        continue;
      }
      channels[name] = s.whole;
      how.whole++;
    }
    return { channels, how };
  }

  /**
   * Store a checkpoint exactly as given: every channel in `channel_values` (also one without a version),
   * none that is not there (a DeltaChannel between snapshots), the other fields as they are.
   * `newVersions` (optional) is not needed: what did not change is found from the bytes, never from
   * versions, identities or the cache alone.
   */
  async put(
    config: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    _newVersions?: ChannelVersions,
  ): Promise<RunnableConfig> {
    const c = config.configurable ?? {};
    if (c.thread_id === undefined || c.thread_id === null) {
      throw new Error('Failed to put checkpoint: the RunnableConfig has no "thread_id" in its "configurable" property.');
    }
    const threadId = String(c.thread_id);
    const ns: string = c.checkpoint_ns ?? "";
    const parentId: string = c.checkpoint_id ?? "";
    const { id, channel_values: channelValues, ...rest } = checkpoint;
    // Everything is serialized or encoded here, before the first await.
    const extra = encodeExtra(rest);
    const encodingMetadata = this.encodeMetadata(metadata as Record<string, unknown>);
    const serializing = this.serializeChannels(channelValues ?? {});
    const [md, serialized] = await Promise.all([encodingMetadata, serializing]);

    const send = async (base: Base | undefined) => {
      const { channels, how } = this.channelWrites(serialized, base?.known);
      const resp = await this.client.putCheckpoint(threadId, channels, {
        checkpointId: id,
        parentId,
        baseId: base && base.id !== parentId ? base.id : "",
        checkpointNs: ns,
        metadata: md,
        extra,
        schemaVersion: (rest as { v?: number }).v ?? 0,
      });
      return { resp, how };
    };

    const base = this.baseFor(threadId, ns, parentId);
    let sent;
    try {
      sent = await send(base);
    } catch (e) {
      if (!(base && e instanceof AgentStateError && e.code === Status.FAILED_PRECONDITION && e.reason === "BASE_MISMATCH")) throw e;
      // The base is not what the saver knew (rewritten or deleted by another writer): forget the thread, send whole values.
      this.stats.baseMismatchRetries++;
      this.forget(threadId);
      sent = await send(undefined);
    }
    this.stats.whole += sent.how.whole;
    this.stats.appended += sent.how.appended;
    this.stats.kept += sent.how.kept;

    const roots = sent.resp.checkpoint?.channels ?? {};
    const known: Known = new Map();
    for (const [name, s] of serialized) {
      const root = roots[name]?.root;
      if (root?.length) known.set(name, { root, fp: s.fp, items: s.items });
    }
    this.remember(threadId, ns, id, known);
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
        value: Array.isArray(value) ? await Promise.all(Array.from(value, (x) => this.dump(x))) : await this.dump(value),
        taskPath,
        replace: channel in WRITES_IDX_MAP,
      })),
    );
    await this.client.putWrites(String(c.thread_id), c.checkpoint_id, items, { checkpointNs: c.checkpoint_ns ?? "" });
  }

  async deleteThread(threadId: string): Promise<void> {
    await this.client.deleteThread(threadId, { allowMissing: true });
    this.forget(threadId);
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

function sameValue(a: unknown, b: unknown): boolean {
  try {
    const x = encode(a);
    const y = encode(b);
    return x.length === y.length && x.every((byte, i) => byte === y[i]);
  } catch {
    return false;
  }
}
export { SidecarStore, jsFilter, jsMatches, type SidecarStoreOptions } from "./langgraph-store.js";
