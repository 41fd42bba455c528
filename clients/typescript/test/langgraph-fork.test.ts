/**
 * Forks, updates and replays of LangGraph.js graphs, and puts LangGraph.js makes that name fewer channels in
 * `newVersions` than they store: side by side with MemorySaver (the same script on both, then everything
 * read back, the sidecar's through a fresh SidecarSaver). The contract: what `put` is given is what a later
 * `getTuple` / `list` returns, from this saver, a fresh one or another process.
 */
import { randomUUID } from "node:crypto";
import { describe, expect, inject, it } from "vitest";
import type { RunnableConfig } from "@langchain/core/runnables";
import { Annotation, Command, END, MemorySaver, START, StateGraph, interrupt, type StateSnapshot } from "@langchain/langgraph";
import { emptyCheckpoint, type BaseCheckpointSaver, type Checkpoint, type CheckpointMetadata, type ChannelVersions } from "@langchain/langgraph-checkpoint";
import { Client } from "../src/client.js";
import { SidecarSaver } from "../src/langgraph.js";
import { dumpThread, normalize, tupleView } from "./side-by-side.js";

const address = inject("address");

const State = Annotation.Root({
  my_key: Annotation<string>({ reducer: (_a, b) => b, default: () => "" }),
  market: Annotation<string>({ reducer: (_a, b) => b, default: () => "" }),
  items: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
});

/** START -> a -> b (interrupts, asking for approval) -> END. */
function build(checkpointer: BaseCheckpointSaver) {
  return new StateGraph(State)
    .addNode("a", (s) => ({ my_key: `${s.my_key} ⛰️`, items: [`a${s.items.length}`] }))
    .addNode("b", () => {
      const answer = interrupt("approve?");
      return { market: String(answer), items: [`b:${String(answer)}`] };
    })
    .addEdge(START, "a")
    .addEdge("a", "b")
    .addEdge("b", END)
    .compile({ checkpointer });
}
type Graph = ReturnType<typeof build>;

/** The parts of a state snapshot a user acts on. */
function view(s: StateSnapshot) {
  return {
    values: s.values,
    next: s.next,
    tasks: s.tasks.map((t) => ({ id: t.id, name: t.name, interrupts: t.interrupts, result: t.result, error: t.error })),
    metadata: s.metadata,
    id: s.config.configurable?.checkpoint_id,
    parent: s.parentConfig?.configurable?.checkpoint_id,
  };
}

async function history(g: Graph, config: RunnableConfig): Promise<StateSnapshot[]> {
  const out: StateSnapshot[] = [];
  for await (const s of g.getStateHistory(config)) out.push(s);
  return out;
}

const THREAD = { configurable: { thread_id: "t" } };

/**
 * Run `script` on a MemorySaver and on a SidecarSaver; what it observes must be the same, and so must
 * everything stored, read back through a fresh SidecarSaver. Returns the sidecar run's observations.
 */
async function sideBySide(script: (g: Graph, see: (x: unknown) => void) => Promise<void>): Promise<unknown[]> {
  const mem = new MemorySaver();
  const memSeen: unknown[] = [];
  await script(build(mem), (x) => memSeen.push(x));

  const namespace = `lgf-${randomUUID()}`;
  const saver = new SidecarSaver({ address, namespace });
  const seen: unknown[] = [];
  try {
    await script(build(saver), (x) => seen.push(x));
  } finally {
    saver.close();
  }
  expect(normalize(seen)).toEqual(normalize(memSeen));

  const fresh = new SidecarSaver({ address, namespace });
  try {
    expect(normalize(await dumpThread(fresh, "t"))).toEqual(normalize(await dumpThread(mem, "t")));
    // a fresh saver's graph sees the same history too
    expect(normalize((await history(build(fresh), THREAD)).map(view))).toEqual(normalize((await history(build(mem), THREAD)).map(view)));
  } finally {
    fresh.close();
  }
  return seen;
}

describe("LangGraph.js forks on SidecarSaver, side by side with MemorySaver", () => {
  it("a __copy__ fork keeps the copied values and next task, and its interrupt fires again", async () => {
    const seen = await sideBySide(async (g, see) => {
      await g.invoke({ my_key: "value", market: "DE" }, THREAD);
      const paused = await g.getState(THREAD);
      const fork = await g.updateState(paused.config, undefined, "__copy__");
      see(view(await g.getState(fork)));
      see(await g.invoke(null, fork)); // the copy re-runs b, which interrupts again
      see(await g.invoke(new Command({ resume: "yes" }), THREAD));
    });
    const forked = seen[0] as ReturnType<typeof view>;
    expect(forked.values).toEqual({ my_key: "value ⛰️", market: "DE", items: ["a0"] });
    expect(forked.next).toEqual(["b"]);
    expect((seen[1] as Record<string, any>).__interrupt__?.[0]?.value).toBe("approve?");
    expect((seen[2] as Record<string, unknown>).items).toEqual(["a0", "b:yes"]);
  });

  it("a __copy__ fork of the thread's first checkpoint re-runs its input", async () => {
    const seen = await sideBySide(async (g, see) => {
      await g.invoke({ my_key: "value", market: "DE" }, THREAD);
      const first = (await history(g, THREAD)).at(-1)!;
      const fork = await g.updateState(first.config, undefined, "__copy__");
      see(view(await g.getState(fork)));
      see(await g.invoke(null, fork));
    });
    expect((seen[0] as ReturnType<typeof view>).next).toEqual(["__start__"]);
    expect((seen[1] as Record<string, unknown>).my_key).toBe("value ⛰️");
  });

  it("a __copy__ fork with updates applies them to the copy", async () => {
    await sideBySide(async (g, see) => {
      await g.invoke({ my_key: "value", market: "DE" }, THREAD);
      const paused = await g.getState(THREAD);
      const fork = await g.updateState(paused.config, [[{ market: "FR", items: ["patched"] }, "b"]], "__copy__");
      see(view(await g.getState(fork)));
      see(await g.invoke(null, fork));
    });
  });

  it("updateState on every older checkpoint (task results), then continuing", async () => {
    await sideBySide(async (g, see) => {
      await g.invoke({ my_key: "value", market: "DE" }, THREAD);
      await g.invoke(new Command({ resume: "ok" }), THREAD);
      const older = (await history(g, THREAD)).slice(1);
      for (const [i, s] of older.entries()) {
        const node = s.next[0] === "b" ? "a" : s.next[0] === "a" ? "__start__" : "b";
        const updated = node === "__start__"
          ? await g.updateState(s.config, { my_key: `start${i}`, market: "US" }, "__start__")
          : await g.updateState(s.config, { my_key: `upd${i}`, items: [`u${i}`] }, node);
        see(view(await g.getState(updated)));
        see(await g.invoke(null, updated));
      }
    });
  });

  it("replays from each older checkpoint", async () => {
    await sideBySide(async (g, see) => {
      await g.invoke({ my_key: "value", market: "DE" }, THREAD);
      await g.invoke(new Command({ resume: "ok" }), THREAD);
      for (const s of (await history(g, THREAD)).slice(1)) see(await g.invoke(null, s.config));
    });
  });
});

describe("SidecarSaver.put stores what it is given, side by side with MemorySaver", () => {
  const cp = (id: string, values: Record<string, unknown>, versions: ChannelVersions): Checkpoint => ({
    ...emptyCheckpoint(),
    id,
    ts: "2026-01-01T00:00:00.000Z",
    channel_values: values,
    channel_versions: versions,
    versions_seen: { a: { x: 1 } },
  });
  const md = (step: number, more: Record<string, unknown> = {}) =>
    ({ source: step < 0 ? "input" : "loop", step, parents: {}, ...more }) as CheckpointMetadata;
  const at = (thread: string, id?: string): RunnableConfig => ({ configurable: { thread_id: thread, checkpoint_ns: "", checkpoint_id: id } });

  /** Apply `script` to a MemorySaver and a SidecarSaver; the threads must read back the same. */
  async function both(script: (s: BaseCheckpointSaver) => Promise<void>, threads = ["t"]): Promise<SidecarSaver> {
    const mem = new MemorySaver();
    await script(mem);
    const namespace = `lgp-${randomUUID()}`;
    const saver = new SidecarSaver({ address, namespace });
    await script(saver);
    const fresh = new SidecarSaver({ address, namespace });
    for (const t of threads) {
      expect(await dumpThread(saver, t)).toEqual(await dumpThread(mem, t));
      expect(await dumpThread(fresh, t)).toEqual(await dumpThread(mem, t));
    }
    fresh.close();
    return saver;
  }

  it("stores channels without a version, and puts without newVersions", async () => {
    const saver = await both(async (s) => {
      // LangGraph.js keeps __pregel_tasks: [] (and a channel's default) without a version
      await s.put(at("t"), cp("1", { __pregel_tasks: [], my_key: "", __start__: { my_key: "v" } }, { __start__: 1 }), md(-1), { __start__: 1 });
      await s.put(at("t", "1"), cp("2", { __pregel_tasks: [], my_key: "v", items: ["a", "b"] }, { my_key: 2, items: 2 }), md(0), { my_key: 2, items: 2 });
      // no newVersions at all: every channel is new
      await (s.put as (...a: unknown[]) => Promise<RunnableConfig>)(at("t", "2"), cp("3", { my_key: "w", items: ["a", "b", "c"] }, { my_key: 3, items: 3 }), md(1));
    });
    expect(saver.stats.appended).toBeGreaterThan(0); // "c" went as an append to ["a", "b"]
    saver.close();
  });

  it("objects handed out and then changed in place are stored as changed; reads hand out fresh objects", async () => {
    const saver = await both(async (s) => {
      await s.put(at("t"), cp("1", { items: [{ text: "a" }, { text: "b" }], doc: { title: "x", tags: ["p"] } }, { items: 1, doc: 1 }), md(0), { items: 1, doc: 1 });
      // a caller changes what getTuple returned, then puts it as the next checkpoint, versions unchanged
      const got = (await s.getTuple(at("t", "1")))!;
      const values = got.checkpoint.channel_values as { items: { text: string }[]; doc: { title: string; tags: string[] } };
      values.items[1].text = "B";
      values.items.push({ text: "c" });
      values.doc.tags.push("q");
      await s.put(at("t", "1"), { ...got.checkpoint, id: "2" }, md(1), {});
      // and once more on what list returned
      for await (const t of s.list(at("t"), { limit: 1 })) {
        (t.checkpoint.channel_values as { doc: { title: string } }).doc.title = "y";
        await s.put(at("t", "2"), { ...t.checkpoint, id: "3" }, md(2), {});
      }
      // changing a returned object changes nothing stored
      const again = (await s.getTuple(at("t", "1")))!;
      (again.checkpoint.channel_values as { items: unknown[] }).items.length = 0;
    });
    const stored = (await saver.getTuple(at("t", "3")))!.checkpoint.channel_values;
    expect(stored).toEqual({ items: [{ text: "a" }, { text: "B" }, { text: "c" }], doc: { title: "y", tags: ["p", "q"] } });
    expect((await saver.getTuple(at("t", "1")))!.checkpoint.channel_values).toEqual({ items: [{ text: "a" }, { text: "b" }], doc: { title: "x", tags: ["p"] } });
    saver.close();
  });

  it("a channel whose version equals the parent's keeps exactly what the parent stores, cached or not", async () => {
    const namespace = `lgp-${randomUUID()}`;
    const saver = new SidecarSaver({ address, namespace });
    const long = Array.from({ length: 50 }, (_, i) => `message ${i}`);
    await saver.put(at("t"), cp("1", { messages: long, doc: { a: 1 } }, { messages: 1, doc: 1 }), md(0), { messages: 1, doc: 1 });
    // the parent is known to this saver: kept, nothing sent but the check of the parent's root
    await saver.put(at("t", "1"), cp("2", { messages: [...long], doc: { a: 1 }, n: 1 }, { messages: 1, doc: 1, n: 2 }), md(1), { n: 2 });
    expect(saver.stats).toMatchObject({ kept: 2, whole: 3 });
    // a fresh saver knows nothing of the parent: it sends the values whole, the sidecar stores the same roots
    const fresh = new SidecarSaver({ address, namespace });
    await fresh.put(at("t", "1"), cp("3", { messages: [...long], doc: { a: 1 } }, { messages: 1, doc: 1 }), md(1), {});
    const client = new Client(address, { namespace });
    try {
      const roots = async (id: string) => {
        const c = await client.getCheckpoint("t", id, { omitValues: true });
        return Object.fromEntries(Object.entries(c.channels).map(([k, v]) => [k, Buffer.from(v.root).toString("hex")]));
      };
      const parent = await roots("1");
      expect(await roots("2")).toMatchObject(parent);
      expect(await roots("3")).toEqual(parent);
      expect((await fresh.getTuple(at("t", "3")))!.checkpoint.channel_values).toEqual({ messages: long, doc: { a: 1 } });
    } finally {
      client.close();
      saver.close();
      fresh.close();
    }
  });

  it("a base another writer rewrote is caught by its root, and the put goes whole", async () => {
    const namespace = `lgp-${randomUUID()}`;
    const saver = new SidecarSaver({ address, namespace });
    const other = new SidecarSaver({ address, namespace });
    await saver.put(at("t"), cp("1", { items: ["a", "b"], doc: "x" }, { items: 1, doc: 1 }), md(0), { items: 1, doc: 1 });
    // another writer stores checkpoint 1 again, with other values
    await other.put(at("t"), cp("1", { items: ["z"], doc: "y" }, { items: 1, doc: 1 }), md(0), { items: 1, doc: 1 });
    await saver.put(at("t", "1"), cp("2", { items: ["a", "b", "c"], doc: "x" }, { items: 2, doc: 1 }), md(1), { items: 2 });
    expect(saver.stats.baseMismatchRetries).toBe(1);
    expect((await other.getTuple(at("t", "2")))!.checkpoint.channel_values).toEqual({ items: ["a", "b", "c"], doc: "x" });
    saver.close();
    other.close();
  });

  it("what a put is given is serialized at the call: later changes to its objects are not stored", async () => {
    await both(async (s) => {
      const values = { items: [{ text: "a" }], blob: new Uint8Array([1, 2, 3]) };
      const pending = s.put(at("t"), cp("1", values, { items: 1, blob: 1 }), md(0, { tags: ["x"] }), { items: 1, blob: 1 });
      values.items[0].text = "changed";
      values.items.push({ text: "more" });
      values.blob[0] = 9;
      await pending;
    });
  });
});
