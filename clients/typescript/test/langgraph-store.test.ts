/**
 * SidecarStore (LangGraph.js BaseStore) side by side with LangGraph.js's InMemoryStore on random scripts:
 * puts (random values), deletes, gets, searches (random filters with every operator, plain values and
 * objects, limits and offsets, vector queries), namespace listings (prefix, suffix, "*", maxDepth, paging),
 * raw batches with repeated keys, and callers that change returned values in place and put them back.
 * The reference sits behind structuredClone at its boundary (it stores and returns the caller's objects).
 * Gets and deletes address only namespaces a put created before the step, and every value has a "text"
 * (InMemoryStore creates a namespace on a delete, and keeps an item's vectors after it is deleted: both
 * documented divergences, docs/memory.md §11.3). Then a graph compiled with `store`.
 */
import { randomUUID } from "node:crypto";
import fc from "fast-check";
import { afterAll, describe, expect, inject, it } from "vitest";
import { InMemoryStore, type Operation } from "@langchain/langgraph-checkpoint";
import { Annotation, END, START, StateGraph } from "@langchain/langgraph";
import { Client } from "../src/index.js";
import { SidecarStore } from "../src/langgraph.js";

const address = inject("address");
const client = new Client(address);
afterAll(() => client.close());

const vec = (t: string) => [(t.length % 7) + 1, [...t].filter((c) => c === "a").length, [...t].filter((c) => c === "e").length % 3,
  [...t].reduce((a, c) => a + c.charCodeAt(0), 0) % 5];
const embeddings = {
  embedDocuments: async (texts: string[]) => texts.map(vec),
  embedQuery: async (t: string) => vec(t),
} as any;
const INDEX = { dims: 4, embeddings, fields: ["text"] };

const NAMESPACES = [["u", "1"], ["u", "2"], ["u", "1", "prefs"], ["docs"], ["a-b"], ["a", "b"]];
const KEYS = ["k1", "k2", "k3"];
const scalar = fc.oneof(fc.constantFrom(null, true, false, 0, 1, 2, 3, 10, -1, 2.5, "3", "apple", "banana", "Date", ""));
const value = fc.record({
  text: fc.constantFrom("likes tea", "banana bread", "a", "eee", "zzz", "apple pie and tea"),
  n: scalar, s: fc.constantFrom("apple", "banana", "cherry", "Date"),
  tags: fc.array(fc.constantFrom("x", "aa"), { maxLength: 2 }),
}, { requiredKeys: ["text"] });
const operand = fc.oneof(scalar, fc.array(scalar, { maxLength: 2 }));
const filterValue = fc.oneof(scalar,
  fc.dictionary(fc.constantFrom("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin"), operand, { minKeys: 0, maxKeys: 2 }),
  fc.dictionary(fc.constantFrom("k", "$gt"), scalar, { maxKeys: 2 }));
const filter = fc.option(fc.dictionary(fc.constantFrom("n", "s", "text", "tags", "missing"), filterValue, { minKeys: 1, maxKeys: 2 }), { nil: undefined });
const ns = fc.constantFrom(...NAMESPACES);
const step = fc.oneof(
  fc.record({ kind: fc.constant("put"), ns, key: fc.constantFrom(...KEYS), value }),
  fc.record({ kind: fc.constant("delete"), ns, key: fc.constantFrom(...KEYS) }),
  fc.record({ kind: fc.constant("get"), ns, key: fc.constantFrom(...KEYS) }),
  fc.record({ kind: fc.constant("mutate"), ns, key: fc.constantFrom(...KEYS), value }),
  fc.record({ kind: fc.constant("search"), prefix: fc.constantFrom([], ["u"], ["u", "1"], ["docs"], ["zz"]), filter,
    limit: fc.constantFrom(0, 1, 2, 3, 10), offset: fc.constantFrom(0, 1, 2),
    query: fc.option(fc.constantFrom("tea", "banana", "a", "zzzz"), { nil: undefined }) }),
  fc.record({ kind: fc.constant("list"), prefix: fc.option(fc.array(fc.constantFrom("u", "1", "*", "docs", "a"), { maxLength: 2 }), { nil: undefined }),
    suffix: fc.option(fc.array(fc.constantFrom("1", "2", "*", "prefs"), { maxLength: 2 }), { nil: undefined }),
    maxDepth: fc.option(fc.integer({ min: 1, max: 3 }), { nil: undefined }), limit: fc.constantFrom(1, 2, 100), offset: fc.constantFrom(0, 1) }),
  fc.record({ kind: fc.constant("batch"), ops: fc.array(fc.record({ sub: fc.constantFrom("put", "get", "delete"),
    ns: fc.constantFrom(["u", "1"], ["u", "2"]), key: fc.constantFrom("k1", "k2"), value }), { minLength: 1, maxLength: 4 }) }),
);

const shape = (r: any): any => Array.isArray(r) ? r.map(shape)
  : r && typeof r === "object" && "key" in r ? [r.namespace, r.key, r.value, "score" in r ? r.score : "none"] : r;

async function outcome(f: () => Promise<any>): Promise<any> {
  try {
    return ["ok", shape(await f())];
  } catch (e: any) {
    return ["error", e?.name, e?.message];
  }
}

function opsOf(s: any, created: Set<string>): Operation[] | undefined {
  const known = (n: string[]) => created.has(n.join("/"));
  switch (s.kind) {
    case "put": created.add(s.ns.join("/")); return [{ namespace: s.ns, key: s.key, value: s.value }];
    case "delete": return known(s.ns) ? [{ namespace: s.ns, key: s.key, value: null }] : undefined;
    case "get": return known(s.ns) ? [{ namespace: s.ns, key: s.key }] : undefined;
    case "search": return [{ namespacePrefix: s.prefix, filter: s.filter, limit: s.limit, offset: s.offset, query: s.query }];
    case "list": {
      const matchConditions = [...(s.prefix ? [{ matchType: "prefix", path: s.prefix }] : []), ...(s.suffix ? [{ matchType: "suffix", path: s.suffix }] : [])];
      return [{ matchConditions: matchConditions as any, maxDepth: s.maxDepth, limit: s.limit, offset: s.offset }];
    }
    case "batch": {
      const before = new Set(created);
      const out: Operation[] = [];
      for (const o of s.ops) {
        if (o.sub === "put") { created.add(o.ns.join("/")); out.push({ namespace: o.ns, key: o.key, value: o.value }); }
        else if (before.has(o.ns.join("/"))) out.push(o.sub === "get" ? { namespace: o.ns, key: o.key } : { namespace: o.ns, key: o.key, value: null });
      }
      return out.length ? out : undefined;
    }
  }
  return undefined;
}

describe("SidecarStore vs InMemoryStore (LangGraph.js)", () => {
  it("random scripts give the same results", async () => {
    await fc.assert(fc.asyncProperty(fc.array(step, { minLength: 1, maxLength: 12 }), fc.boolean(), async (script, indexed) => {
      const ours = new SidecarStore({ client: new Client(address, { namespace: `lgjs-${randomUUID().slice(0, 8)}` }), index: indexed ? INDEX : undefined });
      const ref = new InMemoryStore(indexed ? { index: INDEX } : undefined);
      const refBatch = async (ops: Operation[]) => structuredClone(await ref.batch(structuredClone(ops)));
      const created = new Set<string>();
      try {
        for (const s of script as any[]) {
          if (s.kind === "mutate") {
            if (!created.has(s.ns.join("/"))) continue;
            for (const run of [(o: Operation[]) => ours.batch(o), refBatch]) {
              const [got] = (await run([{ namespace: s.ns, key: s.key }])) as any[];
              if (!got) continue;
              Object.assign(got.value, { n: s.value.n });  // change the returned value in place and put it back
              got.value.tags = [...(got.value.tags ?? []), "x"];
              await run([{ namespace: s.ns, key: s.key, value: got.value }]);
            }
            continue;
          }
          const ops = opsOf(s, created);
          if (!ops) continue;
          const a = await outcome(() => ours.batch(ops));
          const b = await outcome(() => refBatch(ops));
          expect(a, JSON.stringify(s)).toEqual(b);
        }
        const all: Operation[] = [{ namespacePrefix: [], limit: 1000, offset: 0 }, { matchConditions: [], limit: 1000, offset: 0 }];
        expect(shape(await ours.batch(all))).toEqual(shape(await refBatch(all)));
      } finally {
        ours.client.close();
      }
    }), { numRuns: 60 });
  }, 120_000);

  it("namespace validation is InMemoryStore's", async () => {
    const ours = new SidecarStore({ client });
    const ref = new InMemoryStore();
    for (const bad of [["a:b"], [""], ["a.b"]]) {
      expect(await outcome(() => ours.put(bad, "k", { v: 1 }))).toEqual(await outcome(() => ref.put(bad, "k", { v: 1 })));
    }
  });

  it("a graph compiled with store", async () => {
    const State = Annotation.Root({ facts: Annotation<any[]>({ reducer: (a, b) => a.concat(b), default: () => [] }) });
    const build = (store: any) => new StateGraph(State)
      .addNode("remember", async (_s, config: any) => {
        const st = config.store;
        const n = (await st.search(["users", "u1"], { limit: 100 })).length;
        await st.put(["users", "u1"], `f${n}`, { text: `fact number ${n}`, n });
        return { facts: [n] };
      })
      .addNode("recall", async (_s, config: any) => {
        const hits = await config.store.search(["users", "u1"], { query: "fact", filter: { n: { $gte: 0 } }, limit: 3 });
        return { facts: [hits.map((h: any) => h.key).sort()] };
      })
      .addEdge(START, "remember").addEdge("remember", "recall").addEdge("recall", END)
      .compile({ store });
    const oursStore = new SidecarStore({ client: new Client(address, { namespace: `lgjsg-${randomUUID().slice(0, 8)}` }), index: INDEX });
    const ours = build(oursStore);
    const ref = build(new InMemoryStore({ index: INDEX }));
    let last: any;
    for (let i = 0; i < 3; i++) {
      const a = await ours.invoke({ facts: [] });
      const b = await ref.invoke({ facts: [] });
      expect(a).toEqual(b);
      last = a;
    }
    expect(last.facts).toEqual([2, ["f0", "f1", "f2"]]);
    oursStore.client.close();
  });
});
