/**
 * The server's LANGGRAPH_JS comparison mode (docs/memory.md §3.4) side by side with LangGraph.js's
 * InMemoryStore: random items and random filters (every operator, operands of every kind a JS caller writes:
 * numbers of every sort, numeric and non-numeric strings, booleans, null, undefined, arrays, objects, `$in`
 * without an array) go to an InMemoryStore and to the sidecar; the sidecar's search with the filter compiled
 * by `jsFilter` must return the same keys in the same (insertion) order.
 */
import { randomUUID } from "node:crypto";
import fc from "fast-check";
import { afterAll, describe, expect, inject, it } from "vitest";
import { InMemoryStore } from "@langchain/langgraph-checkpoint";
import { Client } from "../src/index.js";
import { jsFilter } from "../src/langgraph-store.js";

const address = inject("address");
const c = new Client(address, { namespace: `tsjs-${randomUUID().slice(0, 8)}` });
afterAll(() => c.close());

const prim = fc.oneof(
  fc.integer({ min: -3, max: 3 }),
  fc.constantFrom(0.5, -0, -2.5, 2 ** 60, 1e21, Number.MAX_SAFE_INTEGER, Infinity, -Infinity, NaN),
  fc.constantFrom("", " 12 ", "3", "2.5", "0x1f", "0b11", "1e3", "Infinity", "-Infinity", "abc", "-0", " ", ".5", "1_0"),
  fc.boolean(), fc.constant(null));
const stored = fc.oneof(prim, prim, fc.array(prim, { maxLength: 2 }), fc.record({ a: prim }, { noNullPrototype: true }));
const KEYS = ["n", "m", "x.y"];
const item = fc.dictionary(fc.constantFrom(...KEYS), stored, { maxKeys: 3, noNullPrototype: true });
const operand = fc.oneof(prim, fc.constant(undefined), fc.array(fc.oneof(prim, fc.constant(undefined)), { maxLength: 3 }),
  fc.record({ a: prim }, { noNullPrototype: true }));
const OPS = ["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin"];
const condition = fc.oneof(operand, fc.dictionary(fc.constantFrom(...OPS), operand, { maxKeys: 3, noNullPrototype: true }));
const filter = fc.dictionary(fc.constantFrom(...KEYS, "zz"), condition, { maxKeys: 3, noNullPrototype: true });

describe("LANGGRAPH_JS mode", () => {
  it("finds what InMemoryStore finds, in its order", async () => {
    let run = 0;
    await fc.assert(fc.asyncProperty(fc.array(item, { minLength: 1, maxLength: 8 }), fc.array(filter, { minLength: 1, maxLength: 4 }),
      async (items, filters) => {
        const path = ["js", `r${run++}`];
        const ref = new InMemoryStore();
        for (const [i, value] of items.entries()) {
          await ref.put(path, `k${i}`, value);
          await c.memory.put(path, `k${i}`, value);
        }
        for (const f of filters) {
          const want = (await ref.search(path, { filter: f, limit: 100 })).map((it) => it.key);
          const got = (await c.memory.search(path, { filter: jsFilter(f), order: "insertion", limit: 100 }))
            .map((s) => s.item!.key);
          expect({ f, items, got }).toEqual({ f, items, got: want });
        }
      }), { numRuns: 60 });
  }, 120_000);

  it("a table of the awkward cases", async () => {
    const path = ["js", "table"];
    const values: Record<string, unknown>[] = [
      { n: 1 }, { n: "1" }, { n: " 12 " }, { n: [5] }, { n: [] }, { n: [1, 2] }, { n: null }, {}, { n: true },
      { n: NaN }, { n: -0 }, { n: "0x10" }, { n: { a: 1 } }, { n: 2 ** 60 }, { n: "Infinity" },
    ];
    const ref = new InMemoryStore();
    for (const [i, v] of values.entries()) { await ref.put(path, `k${i}`, v); await c.memory.put(path, `k${i}`, v); }
    const filters: Record<string, unknown>[] = [
      { n: 1 }, { n: { $gt: 0 } }, { n: { $lte: 0 } }, { n: { $gte: "5" } }, { n: { $lt: [20] } }, { n: { $in: [NaN, 1] } },
      { n: { $in: [undefined] } }, { n: undefined }, { n: { $ne: undefined } }, { n: { $nin: 5 } }, { n: { $in: 5 } },
      { n: {} }, { n: [] }, { n: [5] }, { n: { $eq: null } }, { n: { $gt: null } }, { n: 0 }, { n: { $gte: 16, $lt: 17 } },
      { n: { $gt: 2 ** 59 } }, { n: { $gt: 1e308 } },
    ];
    for (const f of filters) {
      const want = (await ref.search(path, { filter: f, limit: 100 })).map((it) => it.key);
      const got = (await c.memory.search(path, { filter: jsFilter(f), order: "insertion", limit: 100 })).map((s) => s.item!.key);
      expect({ f, got }).toEqual({ f, got: want });
    }
  }, 60_000);
});
