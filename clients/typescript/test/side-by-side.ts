/**
 * Side by side with MemorySaver: the same script on a MemorySaver and on a SidecarSaver, then what each
 * stored read back (the sidecar's through a fresh SidecarSaver, as another process would).
 */
import type { RunnableConfig } from "@langchain/core/runnables";
import type { BaseCheckpointSaver, CheckpointTuple } from "@langchain/langgraph-checkpoint";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const HEX_ID = /^[0-9a-f]{32}$/;

/**
 * A run's observations with its ids (checkpoint, task and interrupt ids, which differ from run to run)
 * replaced by tokens in order of first appearance and timestamps dropped, so two runs of one script
 * compare equal exactly when they saw the same things. Keys are visited in sorted order; a `Map` of tokens
 * may be shared by several calls of one run.
 */
export function normalize(x: unknown, tokens = new Map<string, string>()): unknown {
  if (typeof x === "string") {
    if (!UUID.test(x) && !HEX_ID.test(x)) return x;
    if (!tokens.has(x)) tokens.set(x, `<id${tokens.size}>`);
    return tokens.get(x);
  }
  if (x === null || typeof x !== "object") return x;
  if (x instanceof Uint8Array) return x;
  if (Array.isArray(x)) return x.map((v) => normalize(v, tokens));
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(x).sort()) {
    if (k === "ts" || k === "createdAt") continue;
    Object.defineProperty(out, k, { value: normalize((x as Record<string, unknown>)[k], tokens), enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/** What a tuple says, for comparisons (the configs reduced to thread, namespace and checkpoint id). */
export function tupleView(t: CheckpointTuple | undefined): unknown {
  if (!t) return undefined;
  const conf = (c: RunnableConfig | undefined) =>
    c && { thread_id: c.configurable?.thread_id, checkpoint_ns: c.configurable?.checkpoint_ns, checkpoint_id: c.configurable?.checkpoint_id };
  return { config: conf(t.config), parentConfig: conf(t.parentConfig), checkpoint: t.checkpoint, metadata: t.metadata, pendingWrites: t.pendingWrites ?? [] };
}

/** Everything a saver holds for a thread: its listing (newest first), and each checkpoint read on its own. */
export async function dumpThread(saver: BaseCheckpointSaver, threadId: string, checkpointNs = ""): Promise<unknown> {
  const listed: CheckpointTuple[] = [];
  for await (const t of saver.list({ configurable: { thread_id: threadId, checkpoint_ns: checkpointNs } })) listed.push(t);
  const each = [];
  for (const t of listed) each.push(tupleView(await saver.getTuple(t.config)));
  const latest = tupleView(await saver.getTuple({ configurable: { thread_id: threadId, checkpoint_ns: checkpointNs } }));
  return { listed: listed.map(tupleView), each, latest };
}
