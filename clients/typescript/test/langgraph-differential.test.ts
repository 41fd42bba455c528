/**
 * Randomized differential tests: SidecarSaver against MemorySaver (LangGraph.js's reference saver) on the
 * same random scripts, with the caller doing what real callers do: putting what a read returned after
 * changing it in place, versions and `newVersions` that do not say what changed (or no `newVersions`),
 * channels without versions, forks, updates and replays of random graphs (whose nodes may change state in
 * place), and other processes (fresh savers) reading and writing the same threads.
 *
 * AGENTSTATE_FC_RUNS scales the number of runs (default 1: 40 saver scripts and 15 graph scripts).
 */
import { randomUUID } from "node:crypto";
import fc from "fast-check";
import { describe, expect, inject, it } from "vitest";
import type { RunnableConfig } from "@langchain/core/runnables";
import { Annotation, Command, END, MemorySaver, START, StateGraph, interrupt, type StateSnapshot } from "@langchain/langgraph";
import type { BaseCheckpointSaver, ChannelVersions, Checkpoint, CheckpointMetadata, PendingWrite } from "@langchain/langgraph-checkpoint";
import { SidecarSaver } from "../src/langgraph.js";
import { dumpThread, normalize, tupleView } from "./side-by-side.js";

const address = inject("address");
const SCALE = Number(process.env.AGENTSTATE_FC_RUNS ?? "1");

// ---------------------------------------------------------------- saver scripts

const CHANNELS = ["messages", "doc", "n", "s", "bytes", "tasks"] as const;
type Channel = (typeof CHANNELS)[number];
type Values = Record<string, any>;

const text = fc.string({ maxLength: 12 });
const item = fc.record({ id: fc.string({ minLength: 1, maxLength: 4 }), text });
const channelValue: Record<Channel, fc.Arbitrary<unknown>> = {
  messages: fc.array(item, { maxLength: 6 }),
  doc: fc.record({ title: text, tags: fc.array(text, { maxLength: 3 }) }),
  n: fc.oneof(fc.integer(), fc.double({ noNaN: true, noDefaultInfinity: true })),
  s: text,
  bytes: fc.uint8Array({ maxLength: 8 }),
  tasks: fc.constant([]),
};
const values = fc.record(channelValue, { requiredKeys: [] });

/** An edit a caller makes in place to the channel values it read (or builds afresh). */
const edit = fc.oneof(
  fc.record({ op: fc.constant("push" as const), item }),
  fc.record({ op: fc.constant("setText" as const), index: fc.nat(), text }),
  fc.record({ op: fc.constant("remove" as const), index: fc.nat() }),
  fc.record({ op: fc.constant("tag" as const), text }),
  fc.record({ op: fc.constant("byte" as const), index: fc.nat(), value: fc.integer({ min: 0, max: 255 }) }),
  fc.record({ op: fc.constant("replace" as const), channel: fc.constantFrom(...CHANNELS), values }),
  fc.record({ op: fc.constant("delete" as const), channel: fc.constantFrom(...CHANNELS) }),
  fc.record({ op: fc.constant("undefined" as const), channel: fc.constantFrom(...CHANNELS) }),
);
type Edit = typeof edit extends fc.Arbitrary<infer T> ? T : never;

function applyEdit(v: Values, e: Edit): void {
  switch (e.op) {
    case "push":
      if (Array.isArray(v.messages)) v.messages.push({ ...e.item });
      return;
    case "setText":
      if (Array.isArray(v.messages) && v.messages.length) v.messages[e.index % v.messages.length].text = e.text;
      return;
    case "remove":
      if (Array.isArray(v.messages) && v.messages.length) v.messages.splice(e.index % v.messages.length, 1);
      return;
    case "tag":
      if (v.doc && Array.isArray(v.doc.tags)) v.doc.tags.push(e.text);
      return;
    case "byte":
      if (v.bytes instanceof Uint8Array && v.bytes.length) v.bytes[e.index % v.bytes.length] = e.value;
      return;
    case "replace":
      if (e.channel in e.values) v[e.channel] = structuredClone((e.values as Values)[e.channel]);
      return;
    case "delete":
      delete v[e.channel];
      return;
    case "undefined":
      v[e.channel] = undefined;
      return;
  }
}

const op = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      kind: fc.constant("put" as const),
      thread: fc.nat(1),
      parent: fc.integer({ min: -1, max: 20 }), // an index into the thread's checkpoints; -1: none
      from: fc.constantFrom("read" as const, "list" as const, "fresh" as const), // the values: as read, or new
      fresh: values,
      edits: fc.array(edit, { maxLength: 4 }),
      bump: fc.subarray([...CHANNELS]),
      unversioned: fc.subarray([...CHANNELS], { maxLength: 1 }),
      // newVersions: the bumped channels, a random subset of the versions, nothing, or no argument at all
      newVersions: fc.constantFrom("bumped" as const, "subset" as const, "empty" as const, "undefined" as const),
      subset: fc.subarray([...CHANNELS]),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("writes" as const),
      thread: fc.nat(1),
      target: fc.nat(20),
      task: fc.constantFrom("task-a", "task-b"),
      writes: fc.array(fc.tuple(fc.constantFrom("messages", "s", "__interrupt__", "__error__"), fc.oneof(text, fc.array(item, { maxLength: 3 }))), {
        minLength: 1,
        maxLength: 3,
      }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("read" as const),
      thread: fc.nat(1),
      target: fc.integer({ min: -1, max: 20 }), // -1: the latest
      edits: fc.array(edit, { maxLength: 3 }), // made to what the read returned, and never put
    }),
  },
  { weight: 1, arbitrary: fc.constant({ kind: "fresh" as const }) }, // the sidecar saver is replaced by a fresh one
);
type Op = typeof op extends fc.Arbitrary<infer T> ? T : never;

const at = (thread: string, id?: string): RunnableConfig => ({ configurable: { thread_id: thread, checkpoint_ns: "", checkpoint_id: id } });

/** One saver under a script: its checkpoint ids per thread are the script's. */
class Player {
  constructor(public saver: BaseCheckpointSaver) {}

  async read(thread: string, id: string | undefined, via: "read" | "list") {
    if (via === "read") return this.saver.getTuple(at(thread, id));
    for await (const t of this.saver.list(at(thread, id), { limit: 1 })) return t;
    return undefined;
  }

  /** Play one op; returns what the caller saw. */
  async play(o: Op, ids: string[][], nextId: string): Promise<unknown> {
    if (o.kind === "fresh") return null;
    const thread = `t${o.thread}`;
    const mine = ids[o.thread];
    if (o.kind === "read") {
      const id = o.target < 0 || !mine.length ? undefined : mine[o.target % mine.length];
      const t = await this.saver.getTuple(at(thread, id));
      const seen = structuredClone(tupleView(t));
      if (t) for (const e of o.edits) applyEdit(t.checkpoint.channel_values as Values, e);
      return seen;
    }
    if (o.kind === "writes") {
      if (!mine.length) return null;
      const id = mine[o.target % mine.length];
      await this.saver.putWrites(at(thread, id), o.writes as PendingWrite[], o.task);
      return tupleView(await this.saver.getTuple(at(thread, id)));
    }
    const parentId = o.parent < 0 || !mine.length ? undefined : mine[o.parent % mine.length];
    let v: Values = structuredClone(o.fresh) as Values;
    let versions: ChannelVersions = {};
    let seenBy: Checkpoint["versions_seen"] = {};
    if (parentId && o.from !== "fresh") {
      const t = await this.read(thread, parentId, o.from);
      v = t!.checkpoint.channel_values as Values; // the very object the read returned, changed in place below
      versions = { ...t!.checkpoint.channel_versions };
      seenBy = t!.checkpoint.versions_seen;
    }
    for (const e of o.edits) applyEdit(v, e);
    for (const ch of o.bump) versions[ch] = Number(versions[ch] ?? 0) + 1;
    for (const ch of o.unversioned) delete versions[ch];
    const newVersions: ChannelVersions | undefined =
      o.newVersions === "bumped" ? Object.fromEntries(o.bump.filter((ch) => ch in versions).map((ch) => [ch, versions[ch]]))
      : o.newVersions === "subset" ? Object.fromEntries(o.subset.filter((ch) => ch in versions).map((ch) => [ch, versions[ch]]))
      : o.newVersions === "empty" ? {}
      : undefined;
    const checkpoint: Checkpoint = { v: 4, id: nextId, ts: "2026-01-01T00:00:00.000Z", channel_values: v, channel_versions: versions, versions_seen: seenBy };
    const metadata = { source: "loop", step: mine.length, parents: {} } as CheckpointMetadata;
    const put = this.saver.put.bind(this.saver) as (...a: unknown[]) => Promise<RunnableConfig>;
    await (newVersions === undefined ? put(at(thread, parentId), checkpoint, metadata) : put(at(thread, parentId), checkpoint, metadata, newVersions));
    return tupleView(await this.saver.getTuple(at(thread, nextId)));
  }
}

// ---------------------------------------------------------------- graph scripts

const GraphState = Annotation.Root({
  items: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
  s: Annotation<string>({ reducer: (_a, b) => b, default: () => "" }),
  count: Annotation<number>({ reducer: (a, b) => a + b, default: () => 0 }),
  log: Annotation<string[]>({ reducer: (a, b) => a.concat(b), default: () => [] }),
});
type GState = typeof GraphState.State;

const ACTIONS = ["append", "set", "count", "interrupt", "mutate"] as const;
type Action = (typeof ACTIONS)[number];

function buildGraph(actions: Action[], checkpointer: BaseCheckpointSaver) {
  const g = new StateGraph(GraphState);
  actions.forEach((a, i) => {
    const name = `n${i}`;
    g.addNode(name, (st: GState) => {
      switch (a) {
        case "append":
          return { items: [`${name}:${st.items.length}`] };
        case "set":
          return { s: `${name}:${st.count}` };
        case "count":
          return { count: 1 };
        case "interrupt":
          return { log: [`${name}=${String(interrupt(`${name}?`))}`] };
        case "mutate":
          st.items.push(`${name}!`); // changed in place: the channel keeps its version
          return { count: 1 };
      }
    });
  });
  const b = g as unknown as { addEdge(a: string, b: string): unknown };
  b.addEdge(START, "n0");
  actions.forEach((_a, i) => b.addEdge(`n${i}`, i + 1 < actions.length ? `n${i + 1}` : END));
  return g.compile({ checkpointer });
}
type Graph = ReturnType<typeof buildGraph>;

const graphOp = fc.oneof(
  { weight: 3, arbitrary: fc.record({ kind: fc.constant("run" as const), answer: fc.constantFrom("yes", "no") }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("fork" as const), at: fc.nat(30) }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant("update" as const),
      at: fc.nat(30),
      node: fc.nat(4),
      values: fc.record({ s: text, items: fc.array(text, { maxLength: 2 }) }, { requiredKeys: [] }),
      thenRun: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("replay" as const), at: fc.nat(30) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant("peek" as const), push: text }) },
);
type GraphOp = typeof graphOp extends fc.Arbitrary<infer T> ? T : never;

const GRAPH_THREAD = "g";
const SYNC = { configurable: { thread_id: GRAPH_THREAD }, durability: "sync" as const };

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

async function history(g: Graph): Promise<StateSnapshot[]> {
  const out: StateSnapshot[] = [];
  for await (const s of g.getStateHistory({ configurable: { thread_id: GRAPH_THREAD } })) out.push(s);
  return out;
}

async function playGraph(g: Graph, nodes: number, o: GraphOp): Promise<unknown> {
  const withConfig = (c: RunnableConfig) => ({ ...c, durability: "sync" as const });
  try {
    if (o.kind === "peek") {
      const st = await g.getState(SYNC);
      const seen = structuredClone(view(st));
      if (Array.isArray(st.values.items)) st.values.items.push(o.push); // a caller changes what it was given
      return seen;
    }
    if (o.kind === "run") {
      const st = await g.getState(SYNC);
      const waiting = st.tasks.some((t) => t.interrupts.length > 0);
      return await g.invoke(waiting ? new Command({ resume: o.answer }) : { items: ["in"], s: "input" }, SYNC);
    }
    const h = await history(g);
    if (!h.length) return "no history";
    const target = h[o.at % h.length];
    if (o.kind === "replay") return await g.invoke(null, withConfig(target.config));
    if (o.kind === "fork") {
      const fork = await g.updateState(target.config, undefined, "__copy__");
      return [view(await g.getState(fork)), await g.invoke(null, withConfig(fork))];
    }
    const updated = await g.updateState(target.config, o.values, `n${o.node % nodes}`);
    const seen: unknown[] = [view(await g.getState(updated))];
    if (o.thenRun) seen.push(await g.invoke(null, withConfig(updated)));
    return seen;
  } catch (e) {
    return { error: String((e as Error).message ?? e) };
  }
}

// ---------------------------------------------------------------- the tests

describe("SidecarSaver against MemorySaver, randomized", () => {
  it("saver scripts: puts of changed reads, lying or missing newVersions, writes, fresh savers", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 14 }), async (ops) => {
        const namespace = `lgd-${randomUUID()}`;
        const mem = new Player(new MemorySaver());
        const side = new Player(new SidecarSaver({ address, namespace }));
        const ids: string[][] = [[], []];
        try {
          for (const [k, o] of ops.entries()) {
            if (o.kind === "fresh") {
              (side.saver as SidecarSaver).close();
              side.saver = new SidecarSaver({ address, namespace });
              continue;
            }
            if (o.kind === "put" && o.from !== "fresh" && (o.parent < 0 || !ids[o.thread].length)) continue; // nothing to read
            const id = String(k).padStart(6, "0");
            const want = await mem.play(o, ids, id);
            const got = await side.play(o, ids, id);
            expect(got, `op ${k}: ${o.kind}`).toEqual(want);
            if (o.kind === "put") ids[o.thread].push(id);
          }
          const fresh = new SidecarSaver({ address, namespace });
          try {
            for (const t of ["t0", "t1"]) {
              const want = await dumpThread(mem.saver, t);
              expect(await dumpThread(side.saver, t)).toEqual(want);
              expect(await dumpThread(fresh, t)).toEqual(want);
            }
          } finally {
            fresh.close();
          }
        } finally {
          (side.saver as SidecarSaver).close();
        }
      }),
      { numRuns: Math.max(1, Math.round(40 * SCALE)) },
    );
  }, 300_000);

  it("graph scripts: random graphs, runs, interrupts, __copy__ forks, updates, replays", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.constantFrom(...ACTIONS), { minLength: 1, maxLength: 4 }),
        fc.array(graphOp, { minLength: 1, maxLength: 8 }),
        async (actions, ops) => {
          const mem = new MemorySaver();
          const namespace = `lgd-${randomUUID()}`;
          const saver = new SidecarSaver({ address, namespace });
          const fresh = new SidecarSaver({ address, namespace });
          try {
            const g1 = buildGraph(actions, mem);
            const g2 = buildGraph(actions, saver);
            const want: unknown[] = [];
            const got: unknown[] = [];
            for (const o of ops) {
              want.push(await playGraph(g1, actions.length, o), view(await g1.getState(SYNC)));
              got.push(await playGraph(g2, actions.length, o), view(await g2.getState(SYNC)));
            }
            expect(normalize(got)).toEqual(normalize(want));
            // what was stored, read back by another process, and the history its graph sees
            expect(normalize(await dumpThread(fresh, GRAPH_THREAD))).toEqual(normalize(await dumpThread(mem, GRAPH_THREAD)));
            expect(normalize((await history(buildGraph(actions, fresh))).map(view))).toEqual(normalize((await history(g1)).map(view)));
          } finally {
            saver.close();
            fresh.close();
          }
        },
      ),
      { numRuns: Math.max(1, Math.round(15 * SCALE)) },
    );
  }, 300_000);
});
