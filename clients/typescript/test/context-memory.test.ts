/** GetContext's memory query through the TypeScript client (memoryQuery + getContext({ memoryQuery })): the hits
 * are the items the same search returns, in its order, after the request's own knowledge items, named in their
 * context items and explanation entries; bad queries name `memory_query.<field>` (as tests/test_context_memory.py). */
import { randomUUID } from "node:crypto";
import { afterAll, describe, expect, inject, it } from "vitest";
import { AgentStateError, Client, contextHash, item, knowledge, memoryQuery, searchRequest } from "../src/index.js";
import { ContextSource, Fate } from "../src/gen/agentstate/v1/conversations_pb.js";
import type { GetContextResponse } from "../src/gen/agentstate/v1/conversations_pb.js";

const address = inject("address");
const c = new Client(address, { namespace: `ts-cm-${randomUUID().slice(0, 8)}` });
afterAll(() => c.close());
const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

async function setup(): Promise<[string, string]> {
  const root = `r${randomUUID().slice(0, 6)}`;
  const facts: [string, Record<string, unknown>, number[]][] = [
    ["tea", { fact: "likes green tea", kind: "pref", n: 3 }, [1, 0]],
    ["cats", { fact: "has two cats", kind: "fact", n: 1 }, [0.6, 0.8]],
    ["city", { fact: "lives in Lyon", kind: "fact", n: 2 }, [0, 1]],
    ["coffee", { fact: "no coffee after noon", kind: "pref", n: 5 }, [0.9, 0.1]],
  ];
  for (const [key, value, vec] of facts) await c.memory.put([root, "u1"], key, value, { vectors: { fact: vec } });
  const t = `t-${randomUUID().slice(0, 8)}`;
  await c.conversations.append(t, [item("message", "what do I like?", { role: "user" })], { createThread: true });
  return [root, t];
}

function hits(ctx: GetContextResponse) {
  return ctx.items.filter((i) => i.memoryHit).map((i) => [i.memoryHit!.path.join("/"), i.memoryHit!.key,
    i.memoryHit!.version, i.memoryHit!.score, i.knowledgeIndex]);
}

describe("GetContext memory query", () => {
  it("puts the search's hits in the knowledge layer, in its order, named in the explanation", async () => {
    const [root, t] = await setup();
    const q = memoryQuery([root], { filter: { n: { $gte: 2 } }, vector: [1, 0.05], limit: 3 });
    const ctx = await c.conversations.getContext(t, 10_000, { knowledge: [knowledge("a given fact", { label: "given" })], memoryQuery: q });
    const want = (await c.memory.stub.searchMemoryItems(searchRequest(c.namespace, [root],
      { filter: { n: { $gte: 2 } }, vector: [1, 0.05], limit: 3, refreshTtl: false }))).items;
    expect(hits(ctx).map((h) => h.slice(0, 4))).toEqual(want.map((s) => [s.item!.path.join("/"), s.item!.key, s.item!.version, s.score]));
    expect(hits(ctx).map((h) => h[1])).toEqual(["tea", "coffee", "city"]);
    expect(hits(ctx).map((h) => h[4])).toEqual([1, 2, 3]);  // after the request's one knowledge item
    const know = ctx.items.filter((i) => i.source === ContextSource.KNOWLEDGE);
    expect(know.map((i) => i.knowledgeIndex)).toEqual([0, 1, 2, 3]);
    const ke = ctx.explanation.filter((e) => e.source.case === "knowledgeIndex");
    expect(ke.map((e) => e.memoryHit?.key ?? "")).toEqual(["", "tea", "coffee", "city"]);
    expect(ke.every((e) => e.fate === Fate.KEPT && ctx.items[e.contextIndex!].knowledgeIndex === e.source.value)).toBe(true);
    expect(hex(contextHash(ctx.items))).toBe(hex(ctx.contextHash));
    const again = await c.conversations.getContext(t, 10_000, { knowledge: [knowledge("a given fact", { label: "given" })], memoryQuery: q });
    expect(hex(again.contextHash)).toBe(hex(ctx.contextHash));
    // a filter without a vector: the search's order (newest first), no scores; the default limit is 10
    const plain = await c.conversations.getContext(t, 10_000, { memoryQuery: memoryQuery([root], { filter: { kind: "fact" } }) });
    expect(hits(plain).map((h) => [h[1], h[3], h[4]])).toEqual([["city", undefined, 0], ["cats", undefined, 1]]);
    expect(memoryQuery([root]).limit).toBe(10);
  });

  it.each([
    [memoryQuery(["a"], { limit: 1001 }), "INVALID_FIELD", "memory_query.limit"],
    [memoryQuery(["a"], { filter: { $bad: 1 } }), "INVALID_FILTER", "memory_query.filter.expression['$bad']"],
    [memoryQuery([""]), "INVALID_FIELD", "memory_query.path_prefix[0]"],
    [memoryQuery(["a"], { vector: [1, 0], vectorSpace: "nowhere" }), "VECTOR_SPACE_NOT_FOUND", "memory_query.vector.space"],
  ])("a bad query is refused naming its field (%#)", async (q, reason, field) => {
    const [, t] = await setup();
    const e = await c.conversations.getContext(t, 1000, { memoryQuery: q }).then(() => undefined, (x) => x);
    expect(e).toBeInstanceOf(AgentStateError);
    expect([(e as AgentStateError).reason, (e as AgentStateError).field]).toEqual([reason, field]);
  });
});
