/**
 * The LangGraph.js chat benchmark: SidecarSaver next to MemorySaver (LangGraph.js's reference saver, no
 * storage at all: the framework's own cost) on the same turns, in one run.
 *
 *   npm run bench -- [--turns 400] [--at 50,200,400] [--window 10]
 *
 * A one-node chat graph (MessagesAnnotation, add_messages): each turn the user sends a 400-character
 * message and the node answers with another (3 checkpoints per turn), LangGraph's default durability. The
 * savers take turns in blocks of `window` turns (both run in this process; a block of one, then of the
 * other, the order rotating), so a busy machine slows them alike; "ms/turn at N" is the median wall time
 * of `graph.invoke` over turns N-window+1..N. Also per saver call at N: the median time of `put` and of
 * `getTuple`, and what serializing and fingerprinting the whole state costs on its own (every put
 * serializes every value and hashes it: that is how the saver proves what it may keep or append).
 * The sidecar is started here (unix socket, default durability) from the repo's Python
 * ($SIDECAR_PYTHON, .venv or python3).
 */
import * as nodeCrypto from "node:crypto";
import { AIMessage, HumanMessage } from "@langchain/core/messages";
import { END, MemorySaver, MessagesAnnotation, START, StateGraph } from "@langchain/langgraph";
import type { BaseCheckpointSaver } from "@langchain/langgraph-checkpoint";
import { SidecarSaver } from "../src/langgraph.js";
import { Sidecar } from "../test/sidecar.js";

function arg(name: string, dflt: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : dflt;
}
const TURNS = Number(arg("turns", "400"));
const AT = arg("at", `50,200,${TURNS}`).split(",").map(Number);
const WINDOW = Number(arg("window", "10"));

/** Seeded text: 400 characters of words, unique per (turn, role). */
function message(turn: number, role: string): string {
  let x = (turn * 2 + (role === "ai" ? 1 : 0) + 1) * 2654435761;
  const words = ["state", "agent", "graph", "node", "tool", "call", "value", "store", "fork", "turn", "reply", "plan"];
  let out = `${role} ${turn}:`;
  while (out.length < 400) {
    x = (x * 1103515245 + 12345) >>> 0;
    out += ` ${words[x % words.length]}${x % 97}`;
  }
  return out.slice(0, 400);
}

function build(checkpointer: BaseCheckpointSaver) {
  return new StateGraph(MessagesAnnotation)
    .addNode("chat", (s) => ({ messages: [new AIMessage(message(s.messages.length, "ai"))] }))
    .addEdge(START, "chat")
    .addEdge("chat", END)
    .compile({ checkpointer });
}

/** Wall time of each call of `saver[method]`, kept per turn. */
function timed(saver: BaseCheckpointSaver, method: "put" | "getTuple", sink: number[][]): void {
  const real = (saver[method] as (...a: unknown[]) => Promise<unknown>).bind(saver);
  (saver as unknown as Record<string, unknown>)[method] = async (...a: unknown[]) => {
    const t = performance.now();
    try {
      return await real(...a);
    } finally {
      sink.at(-1)?.push(performance.now() - t);
    }
  };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? (s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2) : NaN;
};

interface Run {
  name: string;
  saver: BaseCheckpointSaver;
  graph: ReturnType<typeof build>;
  turn: number[];
  puts: number[][];
  reads: number[][];
}

async function main(): Promise<void> {
  const sidecar = await Sidecar.temp().start();
  const side = new SidecarSaver({ address: sidecar.address, namespace: "bench" });
  const runs: Run[] = [
    { name: "sidecar", saver: side },
    { name: "memory", saver: new MemorySaver() },
  ].map(({ name, saver }) => ({ name, saver, graph: build(saver), turn: [], puts: [], reads: [] }));
  for (const r of runs) {
    timed(r.saver, "put", r.puts);
    timed(r.saver, "getTuple", r.reads);
  }
  const config = { configurable: { thread_id: "chat" } };
  const t0 = performance.now();
  try {
    for (let block = 0; block * WINDOW < TURNS; block++) {
      const order = block % 2 ? [...runs].reverse() : runs;
      for (const r of order) {
        for (let t = block * WINDOW; t < Math.min(TURNS, (block + 1) * WINDOW); t++) {
          r.puts.push([]);
          r.reads.push([]);
          const start = performance.now();
          await r.graph.invoke({ messages: [new HumanMessage(message(t, "human"))] }, config);
          r.turn.push(performance.now() - start);
        }
      }
    }

    // What serializing and fingerprinting the state costs, at the end (2 x TURNS messages).
    const state = (await side.getTuple(config))!.checkpoint.channel_values.messages as unknown[];
    const serde = (side as unknown as { serde: { dumpsTyped(v: unknown): Promise<[string, Uint8Array]> } }).serde;
    const reps = 20;
    let ser = 0;
    let hash = 0;
    for (let i = 0; i < reps; i++) {
      const a = performance.now();
      const blobs = await Promise.all(state.map((m) => serde.dumpsTyped(m)));
      const b = performance.now();
      for (const [, data] of blobs) nodeCrypto.hash("sha256", data, "base64");
      hash += performance.now() - b;
      ser += b - a;
    }

    const window = (xs: number[][] | number[], n: number) => (xs as unknown[]).slice(Math.max(0, n - WINDOW), n);
    const cols = AT.filter((n) => n <= TURNS);
    console.log(`LangGraph.js chat, ${TURNS} turns (400-character messages, 3 checkpoints per turn), blocks of ${WINDOW} turns, ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    console.log(["saver", ...cols.map((n) => `ms/turn@${n}`), ...cols.map((n) => `put ms@${n}`), ...cols.map((n) => `getTuple ms@${n}`)].map((h, i) => (i ? h.padStart(16) : h.padEnd(8))).join(""));
    for (const r of runs) {
      const cells = [
        ...cols.map((n) => median(window(r.turn, n) as number[])),
        ...cols.map((n) => median((window(r.puts, n) as number[][]).flat())),
        ...cols.map((n) => median((window(r.reads, n) as number[][]).flat())),
      ];
      console.log([r.name.padEnd(8), ...cells.map((x) => x.toFixed(2).padStart(16))].join(""));
    }
    const s = runs[0];
    const m = runs[1];
    for (const n of cols) {
      console.log(`  sidecar / memory ms/turn at ${n}: ${(median(window(s.turn, n) as number[]) / median(window(m.turn, n) as number[])).toFixed(2)} x`);
    }
    console.log(`  serializing the ${state.length} messages: ${(ser / reps).toFixed(2)} ms, fingerprinting them (sha256): ${(hash / reps).toFixed(2)} ms (each put does both, for every value)`);
    console.log(`  sidecar saver stats: ${JSON.stringify(side.stats)}`);
  } finally {
    side.close();
    await sidecar.stop();
    sidecar.cleanup();
  }
}

await main();
