/** MemoryService through the TypeScript client (c.memory): the same items and order as the Python tests. */
import { randomUUID } from "node:crypto";
import { afterAll, describe, expect, inject, it } from "vitest";
import { AgentStateError, Client, InvalidArgument, NotFound, memoryValue } from "../src/index.js";

const address = inject("address");
const c = new Client(address, { namespace: `tsmem-${randomUUID().slice(0, 8)}` });
afterAll(() => c.close());

describe("memory", () => {
  it("put, get, filters, orders, vectors, namespaces, history", async () => {
    const items: [string, Record<string, unknown>][] = [
      ["i1", { n: 1, s: "apple", nested: { k: 1 } }],
      ["i10", { n: 10, s: "banana", nested: { k: 2 } }],
      ["f2", { n: 2.5, s: "cherry", nested: { k: 1 } }],
      ["s3", { n: "3", s: "Date" }],
      ["empty", {}],
    ];
    for (const [key, value] of items) await c.memory.put(["probe", "a"], key, value, { vectors: { t: [key.length, 1] } });
    const got = await c.memory.get(["probe", "a"], "i1");
    expect(memoryValue(got)).toEqual({ n: 1, s: "apple", nested: { k: 1 } });
    expect(got?.version).toBe(1n);
    expect(await c.memory.get(["probe", "a"], "missing")).toBeUndefined();
    const keys = async (filter: Record<string, unknown>) =>
      (await c.memory.search(["probe"], { filter, order: "path_key", limit: 100 })).map((s) => s.item!.key);
    expect(await keys({ "nested.k": 1 })).toEqual(["f2", "i1"]);
    expect(await keys({ n: { $gt: 2 } })).toEqual(["f2", "i10"]);
    expect(await keys({ n: { $ne: 1 } })).toEqual(["empty", "f2", "i10", "s3"]);
    expect(await keys({ $or: [{ n: 1 }, { s: "Date" }] })).toEqual(["i1", "s3"]);
    expect(await keys({ n: { $in: [1, 10] } })).toEqual(["i1", "i10"]);
    const insertion = (await c.memory.search(["probe"], { order: "insertion", limit: 100 })).map((s) => s.item!.key);
    expect(insertion).toEqual(["i1", "i10", "f2", "s3", "empty"]);
    const hits = await c.memory.search(["probe"], { vector: [3, 1], limit: 2, order: "insertion" });
    expect(hits.map((h) => h.item!.key)).toEqual(["i10", "empty"]);
    expect(hits[0].score).toBeCloseTo(1, 12);
    const ties = await c.memory.search(["probe"], { vector: [2, 1], limit: 3, order: "insertion" });
    expect(ties.map((h) => h.item!.key)).toEqual(["i1", "f2", "s3"]);  // equal scores: insertion order
    expect(new Set(ties.map((h) => h.score)).size).toBe(1);
    const paths: string[][] = [];
    for await (const p of c.memory.listNamespaces({ prefix: ["*"], maxDepth: 1 })) paths.push(p);
    expect(paths).toEqual([["probe"]]);
    await c.memory.put(["probe", "a"], "i1", { n: 11 });
    await c.memory.delete(["probe", "a"], "i1");
    const kinds: number[] = [];
    for await (const r of c.memory.history(["probe", "a"], "i1")) kinds.push(r.kind);
    expect(kinds).toEqual([2, 1, 1]);
  });

  it("bad input is refused with code, reason and field", async () => {
    try {
      await c.memory.put([""], "k", { v: 1 });
      throw new Error("expected an error");
    } catch (e) {
      expect(e).toBeInstanceOf(InvalidArgument);
      expect([(e as AgentStateError).reason, (e as AgentStateError).field]).toEqual(["INVALID_FIELD", "path[0]"]);
    }
    try {
      await c.memory.search([], { filter: { n: { $regex: "x" } } });
      throw new Error("expected an error");
    } catch (e) {
      expect((e as AgentStateError).reason).toBe("INVALID_FILTER");
    }
    try {
      await c.memory.put(["p"], "k", { v: 1 }, { vectors: { t: [NaN] } });
      throw new Error("expected an error");
    } catch (e) {
      expect((e as AgentStateError).reason).toBe("VECTOR_INVALID");
    }
    await expect(c.memory.stub.getMemoryItem({ namespace: c.namespace, path: ["p"], key: "none" })).rejects.toBeInstanceOf(NotFound);
  });
});
