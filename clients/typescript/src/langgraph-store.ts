/**
 * LangGraph.js `BaseStore` on the sidecar's memory items (docs/memory.md §11.3), exported from
 * `@agentstate/client/langgraph`:
 *
 *   const store = new SidecarStore({ address, index: { dims: 768, embeddings } });
 *   const graph = builder.compile({ checkpointer, store });   // nodes get it, as with InMemoryStore
 *
 * `batch` sends one BatchMemory in SNAPSHOT semantics (reads see the state before the batch, the last write
 * of an item wins, writes in first-written order) and behaves like LangGraph.js's InMemoryStore, its reference:
 * namespaces validated as InMemoryStore validates them (no ":"; the reserved root allowed), filters with its
 * rules (`===` equality, `Number()` for ordered comparisons, `$in`/`$nin`, `{}` matches all, a plain value or
 * object compared with `===`) — evaluated by the server in its LANGGRAPH_JS mode (`jsFilter` compiles them) on
 * the batch's snapshot, in insertion order —, createdAt kept when an item is put again, scores
 * in float64 with ties in insertion order and the underfull-page rule for items without vectors, namespaces
 * sorted with `localeCompare` of the ":"-joined path. The embedder is the caller's (`index.embeddings`).
 * Divergences: docs/memory.md §11.3.
 */
import { BaseStore, InvalidNamespaceError, validateNamespace } from "@langchain/langgraph-checkpoint";
import type { IndexConfig, Item, Operation, OperationResults, SearchItem } from "@langchain/langgraph-checkpoint";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { Client, type ClientOptions } from "./client.js";
import { fromValue, toValue } from "./values.js";
import { putRequest, searchRequest } from "./memory.js";
import type { MemoryFilter, MemoryItem, MemoryOpSchema, MemoryOpResult } from "./gen/agentstate/v1/memory_pb.js";
import { ComparisonMode, FilterOperator, MemoryFilterSchema } from "./gen/agentstate/v1/memory_pb.js";

const SERVER_LIMIT = 1000;
const OPERATORS = new Set(["$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin"]);

export interface SidecarStoreOptions extends ClientOptions {
  address?: string;
  client?: Client;
  index?: IndexConfig;
  vectorSpace?: string;
}

function isOperatorMap(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && Object.keys(v).every((k) => OPERATORS.has(k));
}

/** One filter condition with LangGraph.js InMemoryStore's rules. */
export function jsMatches(itemValue: unknown, filterValue: unknown): boolean {
  if (!isOperatorMap(filterValue)) return itemValue === filterValue;
  for (const [op, operand] of Object.entries(filterValue)) {
    let ok: boolean;
    if (op === "$eq") ok = itemValue === operand;
    else if (op === "$ne") ok = itemValue !== operand;
    else if (op === "$gt") ok = Number(itemValue) > Number(operand);
    else if (op === "$gte") ok = Number(itemValue) >= Number(operand);
    else if (op === "$lt") ok = Number(itemValue) < Number(operand);
    else if (op === "$lte") ok = Number(itemValue) <= Number(operand);
    else if (op === "$in") ok = Array.isArray(operand) && operand.includes(itemValue);
    else ok = !Array.isArray(operand) || !operand.includes(itemValue); // $nin
    if (!ok) return false;
  }
  return true;
}

type FilterInit = MessageInitShape<typeof MemoryFilterSchema>;
const ORDERED: Record<string, FilterOperator> = {
  $gt: FilterOperator.GT, $gte: FilterOperator.GTE, $lt: FilterOperator.LT, $lte: FilterOperator.LTE,
};
const allOf = (filters: FilterInit[]): FilterInit => ({ kind: { case: "all", value: { filters } } });
const anyOf = (filters: FilterInit[]): FilterInit => ({ kind: { case: "any", value: { filters } } });
const negate = (f: FilterInit): FilterInit => ({ kind: { case: "negate", value: f } });
const NEVER = anyOf([]);
const ALWAYS = allOf([]);

function jsCond(key: string, op: FilterOperator, value?: unknown): FilterInit {
  return { kind: { case: "field", value: {
    path: { segments: [{ kind: { case: "key", value: key } }] }, op,
    value: value === undefined ? undefined : toValue(value), mode: ComparisonMode.LANGGRAPH_JS,
  } } };
}

const isPrimitive = (v: unknown): boolean =>
  v === null || typeof v === "string" || typeof v === "number" || typeof v === "boolean" || typeof v === "bigint";

/** `item.value[key] === x`: undefined is a missing key; an object (not the item's own) never equals. */
function jsEquals(key: string, x: unknown): FilterInit {
  if (x === undefined) return negate(jsCond(key, FilterOperator.EXISTS));
  return isPrimitive(x) ? jsCond(key, FilterOperator.EQ, x) : NEVER;
}

/** `list.includes(item.value[key])`. */
function jsIncludes(key: string, list: unknown[]): FilterInit {
  const parts = [jsCond(key, FilterOperator.IN, list.filter(isPrimitive))];
  if (list.includes(undefined)) parts.push(negate(jsCond(key, FilterOperator.EXISTS)));
  return parts.length === 1 ? parts[0] : anyOf(parts);
}

/**
 * A LangGraph.js filter (InMemoryStore's `compareValues` on `item.value[key]` for each top-level key) as a
 * MemoryFilter tree in the server's LANGGRAPH_JS mode (docs/memory.md §3.4): the operands JavaScript alone
 * can judge are settled here (objects never `===`, `Number()` of the operand, `$in` without an array), the
 * item's side on the server. Tested side by side with InMemoryStore (test/memory-jsmode.test.ts).
 */
export function jsFilter(filter: Record<string, unknown>): MemoryFilter {
  const parts: FilterInit[] = [];
  for (const [key, v] of Object.entries(filter)) {
    if (!isOperatorMap(v)) { parts.push(jsEquals(key, v)); continue; }
    for (const [op, operand] of Object.entries(v)) {
      if (op === "$eq") parts.push(jsEquals(key, operand));
      else if (op === "$ne") parts.push(negate(jsEquals(key, operand)));
      else if (op === "$in") parts.push(Array.isArray(operand) ? jsIncludes(key, operand) : NEVER);
      else if (op === "$nin") parts.push(Array.isArray(operand) ? negate(jsIncludes(key, operand)) : ALWAYS);
      else parts.push(jsCond(key, ORDERED[op], Number(operand)));
    }
  }
  return create(MemoryFilterSchema, parts.length === 1 ? parts[0] : allOf(parts));
}

/** A search op's filter for the server (none when it has no conditions). */
function serverFilter(op: any): MemoryFilter | undefined {
  return op.filter && Object.keys(op.filter).length > 0 ? jsFilter(op.filter) : undefined;
}

/** A field path in tokens as InMemoryStore splits it: on dots, keeping "[...]" and "{...}" groups whole. */
export function pathTokens(path: string): string[] {
  const out: string[] = [];
  let word = "";
  const flush = () => { if (word) { out.push(word); word = ""; } };
  for (let i = 0; i < path.length;) {
    const ch = path[i];
    if (ch === "[" || ch === "{") {
      flush();
      const close = ch === "[" ? "]" : "}";
      let depth = 0;
      let group = "";
      do {
        if (path[i] === ch) depth++;
        else if (path[i] === close) depth--;
        group += path[i++];
      } while (i < path.length && depth > 0);
      out.push(group);
    } else {
      if (ch === ".") flush(); else word += ch;
      i++;
    }
  }
  flush();
  return out;
}

const asText = (v: unknown): string[] =>
  typeof v === "string" || typeof v === "number" || typeof v === "boolean" ? [String(v)]
    : v === null || v === undefined ? [] : typeof v === "object" ? [JSON.stringify(v, null, 2)] : [];

/** The texts at a field path of a value, as InMemoryStore extracts them for embedding. */
export function textsAt(value: unknown, path: string): string[] {
  if (!path || path === "$") return [JSON.stringify(value, null, 2)];
  const tokens = pathTokens(path);
  const walk = (v: any, at: number): string[] => {
    if (at >= tokens.length) return asText(v);
    const t = tokens[at];
    const found: string[] = at === 0 && t === "$" ? [JSON.stringify(v, null, 2)] : [];
    if (t.startsWith("[") && t.endsWith("]")) {
      if (!Array.isArray(v)) return [];
      const inner = t.slice(1, -1);
      if (inner === "*") for (const x of v) found.push(...walk(x, at + 1));
      else {
        let n = parseInt(inner, 10);
        if (n < 0) n += v.length;
        if (n >= 0 && n < v.length) found.push(...walk(v[n], at + 1));
      }
    } else if (t.startsWith("{") && t.endsWith("}")) {
      if (typeof v !== "object" || v === null) return [];
      for (const name of t.slice(1, -1).split(",").map((f) => f.trim())) {
        const sub = pathTokens(name);
        if (!sub.length) continue;
        let cur: any = v;
        for (const part of sub) {
          cur = cur && typeof cur === "object" && part in cur ? cur[part] : undefined;
          if (cur === undefined) break;
        }
        if (cur !== undefined && cur !== null) found.push(...asText(cur));
      }
    } else if (t === "*") {
      const xs = Array.isArray(v) ? v : typeof v === "object" && v !== null ? Object.values(v) : [];
      for (const x of xs) found.push(...walk(x, at + 1));
    } else if (typeof v === "object" && v !== null && t in v) found.push(...walk(v[t], at + 1));
    return found;
  };
  return walk(value, 0);
}

/** A copy of a plain value without its undefined object properties (what JSON keeps of it; InMemoryStore keeps
 * them as undefined, which reads the same). Other objects are left as they are for the codec. */
function withoutUndefined(v: any): any {
  if (Array.isArray(v)) return v.map(withoutUndefined);
  if (v && typeof v === "object" && Object.getPrototypeOf(v) === Object.prototype) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) if (x !== undefined) out[k] = withoutUndefined(x);
    return out;
  }
  return v;
}

function validateLabels(namespace: string[]): void {
  validateNamespace(namespace, { allowReservedRoot: true });
  if (namespace.some((label) => label.includes(":"))) {
    throw new InvalidNamespaceError("Namespace labels cannot contain colons (':'), the InMemoryStore path separator.");
  }
}

type Op = MessageInitShape<typeof MemoryOpSchema>;
interface Plan { kind: "get" | "put" | "search" | "list"; first: number; op: any; vector?: boolean }

export class SidecarStore extends BaseStore {
  readonly client: Client;
  readonly index?: IndexConfig;
  readonly vectorSpace: string;
  private readonly ownClient: boolean;

  constructor(opts: SidecarStoreOptions = {}) {
    super();
    if (!opts.client && !opts.address) throw new Error("SidecarStore needs an address or a client");
    this.ownClient = !opts.client;
    this.client = opts.client ?? new Client(opts.address, opts);
    this.index = opts.index;
    this.vectorSpace = opts.vectorSpace ?? (opts.index ? `langgraph:${opts.index.dims}` : "langgraph");
  }

  close(): void {
    if (this.ownClient) this.client.close();
  }

  private item(m: MemoryItem): Item {
    return {
      namespace: [...m.path], key: m.key, value: fromValue(m.value) as Record<string, any>,
      createdAt: new Date(Number(m.createTime!.seconds) * 1000 + Math.floor(m.createTime!.nanos / 1e6)),
      updatedAt: new Date(Number(m.updateTime!.seconds) * 1000 + Math.floor(m.updateTime!.nanos / 1e6)),
    };
  }

  /** Texts to embed, as InMemoryStore extracts them: from the last put of each item, by text. */
  private texts(puts: any[]): Record<string, [string[], string, string][]> {
    const toEmbed: Record<string, [string[], string, string][]> = {};
    if (!this.index) return toEmbed;
    for (const op of puts) {
      if (op.value === null || op.index === false) continue;
      const paths: string[] = op.index === null || op.index === undefined ? this.index.fields ?? ["$"] : op.index;
      for (const path of paths) {
        const texts = textsAt(op.value, path);
        if (!texts.length) continue;
        texts.forEach((text, i) => {
          (toEmbed[text] ??= []).push([op.namespace, op.key, texts.length > 1 ? `${path}.${i}` : path]);
        });
      }
    }
    return toEmbed;
  }

  async batch<O extends Operation[]>(operations: O): Promise<OperationResults<O>> {
    const ops: any[] = operations;
    const puts = new Map<string, any>();
    for (const op of ops) {
      if ("namespace" in op) validateLabels(op.namespace);
      if ("namespacePrefix" in op && op.namespacePrefix.length > 0) validateLabels(op.namespacePrefix);
      if ("value" in op) puts.set(`${op.namespace.join(":")}:${op.key}`, op);
    }
    const queries = new Map<string, number[]>();
    if (this.index?.embeddings) {
      const wanted = [...new Set(ops.filter((op) => "namespacePrefix" in op && op.query).map((op) => op.query as string))];
      const vecs = await Promise.all(wanted.map((q) => this.index!.embeddings.embedQuery(q)));
      wanted.forEach((q, i) => queries.set(q, vecs[i]));
    }
    const vectors = new Map<string, Record<string, number[]>>();
    const toEmbed = this.texts([...puts.values()]);
    if (this.index?.embeddings && Object.keys(toEmbed).length > 0) {
      const embedded = await this.index.embeddings.embedDocuments(Object.keys(toEmbed));
      for (const [text, places] of Object.entries(toEmbed)) {
        const vec = embedded.shift();
        if (!vec) throw new Error(`No embedding found for text: ${text}`);
        for (const [ns, key, field] of places) {
          const k = `${ns.join(":")}:${key}`;
          vectors.set(k, { ...(vectors.get(k) ?? {}), [field]: vec });
        }
      }
    }
    return this.send(ops, puts, queries, vectors, false) as Promise<OperationResults<O>>;
  }

  private async send(ops: any[], puts: Map<string, any>, queries: Map<string, number[]>,
    vectors: Map<string, Record<string, number[]>>, noSpace: boolean): Promise<any[]> {
    const req: Op[] = [];
    const plans: Plan[] = [];
    const ns = this.client.namespace;
    for (const op of ops) {
      const first = req.length;
      if ("namespacePrefix" in op) {
        const filter = serverFilter(op);
        req.push({ op: { case: "search", value: { ...searchRequest("", op.namespacePrefix, { order: "insertion", limit: SERVER_LIMIT, filter }), namespace: "" } } });
        const vector = op.query !== undefined && op.query !== "" && queries.has(op.query);
        if (vector && !noSpace) {
          req.push({ op: { case: "search", value: { ...searchRequest("", op.namespacePrefix, {
            order: "insertion", limit: SERVER_LIMIT, vector: queries.get(op.query), vectorSpace: this.vectorSpace, omitValues: true, filter,
          }), namespace: "" } } });
        }
        plans.push({ kind: "search", first, op, vector });
      } else if ("value" in op) {
        const k = `${op.namespace.join(":")}:${op.key}`;
        if (op.value === null) {
          req.push({ op: { case: "delete", value: { path: op.namespace, key: op.key, allowMissing: true } } });
        } else {
          const last = puts.get(k) === op;
          const vecs = last ? vectors.get(k) : undefined;
          req.push({ op: { case: "put", value: { ...putRequest("", op.namespace, op.key, withoutUndefined(op.value), {
            vectors: vecs, vectorSpace: vecs ? this.vectorSpace : "", mergeVectors: true,
          }), namespace: "" } } });
        }
        plans.push({ kind: "put", first, op });
      } else if ("matchConditions" in op) {
        req.push({ op: { case: "listNamespaces", value: { includeEmpty: true, limit: SERVER_LIMIT } } });
        plans.push({ kind: "list", first, op });
      } else {
        req.push({ op: { case: "get", value: { path: op.namespace, key: op.key, allowMissing: true } } });
        plans.push({ kind: "get", first, op });
      }
    }
    if (!req.length) return [];
    let results: MemoryOpResult[];
    try {
      results = await this.client.memory.batch(req, { semantics: "snapshot" });
    } catch (e: any) {
      if (e?.reason === "VECTOR_SPACE_NOT_FOUND" && !noSpace) return this.send(ops, puts, queries, vectors, true);
      throw e;
    }
    const out: any[] = [];
    for (const plan of plans) {
      const r = results[plan.first].result;
      if (plan.kind === "get") {
        const item = r.case === "get" && r.value.item ? this.item(r.value.item) : null;
        // InMemoryStore returns its stored item object and then updates it in place when the same batch puts
        // the item again: such a get shows the new value (and update time)
        const later = item ? puts.get(`${plan.op.namespace.join(":")}:${plan.op.key}`) : undefined;
        if (item && later && later.value !== null) {
          const put = plans.find((p) => p.kind === "put" && p.op === later);
          const stored = put ? results[put.first].result : undefined;
          item.value = structuredClone(later.value);
          if (stored?.case === "put" && stored.value.item) item.updatedAt = this.item({ ...stored.value.item, value: undefined } as any).updatedAt;
        }
        out.push(item);
      }
      else if (plan.kind === "put") out.push(null);
      else if (plan.kind === "list") out.push(this.namespaces(plan.op, r.case === "listNamespaces" ? r.value.namespaces.map((n) => [...n.path]) : []));
      else out.push(await this.searchPlan(plan, results, noSpace));
    }
    return out;
  }

  private async all(op: any, first: MemoryItem[]): Promise<MemoryItem[]> {
    if (first.length < SERVER_LIMIT) return first;
    const items: MemoryItem[] = [];
    let pageToken = "";
    do {
      const resp = await this.client.memory.stub.searchMemoryItems({ ...searchRequest(this.client.namespace, op.namespacePrefix,
        { order: "insertion", refreshTtl: false, filter: serverFilter(op) }), pageSize: SERVER_LIMIT, pageToken });
      items.push(...resp.items.map((s) => s.item!));
      pageToken = resp.nextPageToken;
    } while (pageToken);
    return items;
  }

  private async searchPlan(plan: Plan, results: MemoryOpResult[], noSpace: boolean): Promise<SearchItem[]> {
    const op = plan.op;
    const r = results[plan.first].result;
    const everything = await this.all(op, r.case === "search" ? r.value.items.map((s) => s.item!) : []);
    const candidates = everything.map((m) => this.item(m));  // filtered by the server (LANGGRAPH_JS mode)
    const offset = op.offset ?? 0;
    const limit = op.limit ?? 10;
    if (!plan.vector) return candidates.slice(offset, offset + limit).map((it) => ({ ...it, score: undefined }));
    const keyOf = (it: { namespace: string[]; key: string }) => `${it.namespace.join(":")}:${it.key}`;
    const byKey = new Map(candidates.map((it) => [keyOf(it), it]));
    const scored: [number, Item][] = [];
    if (!noSpace) {
      const v = results[plan.first + 1].result;
      for (const s of v.case === "search" ? v.value.items : []) {
        const it = byKey.get(keyOf({ namespace: s.item!.path, key: s.item!.key }));
        if (it) scored.push([s.score!, it]);
      }
    }
    const withVectors = new Set(scored.map(([, it]) => keyOf(it)));
    const kept: [number | undefined, Item][] = scored.slice(offset, offset + limit);
    if (kept.length < limit) {
      const scoreless = candidates.filter((it) => !withVectors.has(keyOf(it)));
      for (const it of scoreless.slice(0, limit - kept.length)) kept.push([undefined, it]);
    }
    return kept.map(([score, it]) => ({ ...it, score }));
  }

  private namespaces(op: any, found: string[][]): string[][] {
    let names = found;
    if (op.matchConditions?.length) {
      names = names.filter((n) => op.matchConditions.every((c: any) => {
        if (c.path.length > n.length) return false;
        const at = c.matchType === "prefix" ? 0 : n.length - c.path.length;
        return c.path.every((p: string, i: number) => p === "*" || n[at + i] === p);
      }));
    }
    if (op.maxDepth !== undefined) names = [...new Set(names.map((n) => n.slice(0, op.maxDepth).join(":")))].map((n) => n.split(":"));
    names.sort((a, b) => a.join(":").localeCompare(b.join(":")));
    const offset = op.offset ?? 0;
    return names.slice(offset, offset + (op.limit ?? names.length));
  }
}
