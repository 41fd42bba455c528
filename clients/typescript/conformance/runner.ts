/**
 * The TypeScript runner of the cross-language scenario suite (clients/conformance/README.md).
 *
 *   node dist/conformance/runner.js --address ADDR --lang ts --run RUN --dir DIR --mode write
 *   node dist/conformance/runner.js --address ADDR --lang ts --run RUN --dir DIR --mode read --peers py,go
 *
 * The same interpreter as clients/conformance/runner.py (the reference), in TypeScript.
 */
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { create } from "@bufbuild/protobuf";
import {
  AgentStateError,
  Append,
  Client,
  DateTime,
  Decimal,
  Float,
  KEEP,
  Opaque,
  SetKeys,
  Uuid,
  bytesToHex,
  codeName,
  decode,
  encode,
  fromValue,
  hexToBytes,
  steps as migrationSteps,
} from "../src/index.js";
import { MigrationStatus, type MigrationStepSchema } from "../src/gen/agentstate/v1/schemas_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { channelWrite, toValue } from "../src/values.js";
import { ITEM_KINDS, contextHash, type KindName } from "../src/conversations.js";
import { ConfigScope, ContextSource, Fate, ItemKind, type ContextMemoryHit, type ExplanationEntry, type GetContextResponse } from "../src/gen/agentstate/v1/conversations_pb.js";

/** [MigrationStatus name, schema_version, stored_schema_version] of a read's answer (runner.py's migration_desc). */
function migrationDesc(x: { migration: MigrationStatus; schemaVersion: number; storedSchemaVersion: number }): unknown[] {
  return [MigrationStatus[x.migration], x.schemaVersion, x.storedSchemaVersion];
}

/** What a get_context step's "expect" may name, as clients/conformance/runner.py's context_desc says. */
function contextDesc(ctx: GetContextResponse): Record<string, unknown> {
  const entry = (e: ExplanationEntry): string => {
    const src = e.source;
    const head = src.case === "pinId" ? `pin:${src.value}` : src.case === "knowledgeIndex" ? `knowledge:${src.value}`
      : `${src.value?.firstSeq}-${src.value?.lastSeq}`;
    let out = `${head} ${Fate[e.fate].toLowerCase()} t=${e.tokens}`;
    if (e.contextIndex !== undefined) out += ` @${e.contextIndex}`;
    if (e.summaryId) out += ` ${e.summaryId}`;
    if (e.duplicateOfSeq) out += ` dup=${e.duplicateOfSeq}`;
    if (e.memoryHit) out += ` mem=${hit(e.memoryHit)}`;
    return out;
  };
  const hit = (h: ContextMemoryHit): string => `${h.path.join("/")}/${h.key} v${h.version}${h.score !== undefined ? " scored" : ""}`;
  return {
    sources: ctx.items.map((i) => ContextSource[i.source].toLowerCase()),
    tokens: ctx.items.map((i) => i.tokens),
    estimated: ctx.items.map((i) => i.tokensEstimated),
    total_tokens: Number(ctx.totalTokens),
    stable_prefix_items: ctx.stablePrefixItems,
    estimated_raw_tokens: Number(ctx.estimatedRawTokens),
    client_counted_tokens: Number(ctx.clientCountedTokens),
    explanation: ctx.explanation.map(entry),
    memory_hits: ctx.items.filter((i) => i.memoryHit).map((i) => hit(i.memoryHit!)),
  };
}
import {
  ChangeKind,
  CreateThreadRequestSchema,
  IfExists,
  PutCheckpointRequestSchema,
  PutWritesRequestSchema,
  type ChannelChange,
  type Checkpoint,
} from "../src/gen/agentstate/v1/threads_pb.js";
import { ValueSchema, type Value } from "../src/gen/agentstate/v1/values_pb.js";
import { ComparisonMode, FilterOperator, MemoryFilterSchema, type MemoryFilter } from "../src/gen/agentstate/v1/memory_pb.js";
import { memoryQuery } from "../src/memory.js";

type Desc = Record<string, any>;
type Step = Record<string, any>;

const OPERATORS: Record<string, FilterOperator> = { eq: FilterOperator.EQ, ne: FilterOperator.NE, gt: FilterOperator.GT,
  gte: FilterOperator.GTE, lt: FilterOperator.LT, lte: FilterOperator.LTE, in: FilterOperator.IN, nin: FilterOperator.NIN,
  exists: FilterOperator.EXISTS, is_type: FilterOperator.IS_TYPE, length_eq: FilterOperator.LENGTH_EQ };
const MODES: Record<string, ComparisonMode> = { agentstate: ComparisonMode.AGENTSTATE, python: ComparisonMode.LANGGRAPH_PYTHON,
  js: ComparisonMode.LANGGRAPH_JS };

/** A typed MemoryFilter tree from its scenario form (as runner.py's tree_of). */
function treeOf(d: Desc): MemoryFilter {
  if (d.all) return create(MemoryFilterSchema, { kind: { case: "all", value: { filters: d.all.map(treeOf) } } });
  if (d.any) return create(MemoryFilterSchema, { kind: { case: "any", value: { filters: d.any.map(treeOf) } } });
  if (d.not) return create(MemoryFilterSchema, { kind: { case: "negate", value: treeOf(d.not) } });
  const segments = (d.path as (string | number)[]).map((x) =>
    typeof x === "string" ? { kind: { case: "key" as const, value: x } } : { kind: { case: "index" as const, value: x } });
  return create(MemoryFilterSchema, { kind: { case: "field", value: {
    path: { segments }, op: OPERATORS[d.op], mode: MODES[d.mode ?? "agentstate"],
    value: d.value === undefined ? undefined : toValue(fromDesc(resolveDesc(d.value))),
  } } });
}

/** A step's filter: an expression map (`filter`), a typed tree (`tree`), or undefined. */
function filterOf(step: Step): Record<string, unknown> | MemoryFilter | undefined {
  if (step.tree) return treeOf(step.tree);
  return step.filter ? (fromDesc(resolveDesc(step.filter)) as Record<string, unknown>) : undefined;
}

const CONF = resolve(import.meta.dirname, "../../../conformance");
const VALUES: Record<string, Desc> = JSON.parse(readFileSync(join(CONF, "values.json"), "utf8")).values;
const ENCODINGS: Record<string, string> = JSON.parse(readFileSync(join(CONF, "encodings.json"), "utf8")).encodings;
const SCENARIOS: { name: string; steps: Step[] }[] = readdirSync(join(CONF, "scenarios"))
  .filter((f) => f.endsWith(".json"))
  .sort()
  .map((f) => JSON.parse(readFileSync(join(CONF, "scenarios", f), "utf8")));

function resolveDesc(d: any): any {
  if (Array.isArray(d)) return d.map(resolveDesc);
  if (d && typeof d === "object") {
    const keys = Object.keys(d);
    if (keys.length === 1 && keys[0] === "ref") return resolveDesc(VALUES[d.ref]);
    if (keys.length === 1 && keys[0] === "$all_values_map") {
      return { map: Object.fromEntries(Object.entries(VALUES).map(([k, v]) => [k, resolveDesc(v)])) };
    }
    return Object.fromEntries(Object.entries(d).map(([k, v]) => [k, resolveDesc(v)]));
  }
  return d;
}

/** A language-neutral description as the JavaScript value this client encodes. */
function fromDesc(d: Desc): unknown {
  const [[tag, arg]] = Object.entries(d);
  switch (tag) {
    case "nil":
      return null;
    case "bool":
      return arg;
    case "int":
      return BigInt(arg);
    case "float": {
      const f = arg === "nan" ? NaN : arg === "inf" ? Infinity : arg === "-inf" ? -Infinity : Number(arg);
      return new Float(f);
    }
    case "str":
      return arg;
    case "bytes":
      return hexToBytes(arg);
    case "list":
      return (arg as Desc[]).map(fromDesc);
    case "map": {
      const out: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(arg as Record<string, Desc>)) {
        Object.defineProperty(out, k, { value: fromDesc(v), enumerable: true, writable: true, configurable: true });
      }
      return out;
    }
    case "datetime":
      return DateTime.parse(arg);
    case "uuid":
      return Uuid.parse(arg);
    case "decimal":
      return new Decimal(arg);
    case "set":
      return new Set((arg as Desc[]).map(fromDesc));
    case "opaque":
      return new Opaque(arg.type, hexToBytes(arg.data));
  }
  throw new Error(`unknown value tag ${tag}`);
}

const expandChannels = (ch: Record<string, any>) =>
  ch.$each_value ? Object.fromEntries(Object.entries(VALUES).map(([k, v]) => [k, { value: resolveDesc(v) }])) : ch;
const expandExpected = (ch: Record<string, any>) =>
  ch.$each_value
    ? Object.fromEntries(Object.entries(VALUES).map(([k, v]) => [k, resolveDesc(v)]))
    : Object.fromEntries(Object.entries(ch).map(([k, v]) => [k, resolveDesc(v)]));
const rawBytes = (spec: string) => (spec === "$deep65" ? Uint8Array.from([...new Array(65).fill(0x91), 0x01]) : hexToBytes(spec));
const hex = bytesToHex;

/** The canonical bytes this language makes of a Value read from the server. */
function valueBytes(v: Value | undefined): Uint8Array {
  return encode(fromValue(v));
}

/** JSON with object keys sorted, to compare records made by any language. */
function stable(v: any): string {
  if (Array.isArray(v)) return `[${v.map(stable).join(",")}]`;
  if (v && typeof v === "object") return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${stable(v[k])}`).join(",")}}`;
  return JSON.stringify(v);
}

const sameKeys = (a: string[], b: string[]) => JSON.stringify([...a].sort()) === JSON.stringify([...b].sort());

class Runner {
  passed = 0;
  failed = 0;
  saved: Record<string, string> = {};
  records: Record<string, any> = {};
  constructor(readonly address: string, readonly lang: string, readonly run: string) {}

  check(ok: boolean, what: string): void {
    if (ok) this.passed++;
    else {
      this.failed++;
      console.log(`FAIL [${this.lang}] ${what}`);
    }
  }

  ns(lang: string): string {
    return `conf-${this.run}-${lang}`;
  }

  static thread(name: string): string {
    return name.startsWith("=") ? name.slice(1) : name;
  }

  writeOf(spec: any): unknown {
    if ("value" in spec) return fromDesc(resolveDesc(spec.value));
    if ("append" in spec) {
      return new Append(spec.append.map((x: Desc) => fromDesc(resolveDesc(x))), {
        keepFirst: spec.keep_first,
        baseRoot: spec.base_root ? hexToBytes(spec.base_root) : undefined,
      });
    }
    if ("set" in spec || "delete" in spec) {
      const set: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(spec.set ?? {})) set[k] = fromDesc(resolveDesc(v));
      return new SetKeys(set, spec.delete ?? []);
    }
    if (spec.keep) return KEEP;
    throw new Error(`unknown channel write ${JSON.stringify(spec)}`);
  }

  valueOf(desc: any): Value {
    return "raw" in desc
      ? create(ValueSchema, { kind: { case: "msgpack", value: rawBytes(desc.raw) } })
      : toValue(fromDesc(resolveDesc(desc)));
  }

  async do(c: Client, step: Step): Promise<any> {
    const t = Runner.thread(step.thread ?? "");
    const meta = (key: string) =>
      Object.fromEntries(Object.entries(step[key] ?? {}).map(([k, v]) => [k, fromDesc(resolveDesc(v))]));
    switch (step.op) {
      case "register_schema":
        return c.schemas.register(step.name, step.versions.map((v: any[]) => v.map((d) => this.stepOf(d))),
          { failurePolicy: step.failure_policy ?? "fail" });
      case "create_thread": {
        const policy: Record<string, IfExists> = { error: IfExists.ERROR, return: IfExists.RETURN, merge: IfExists.MERGE_METADATA };
        const metadata = Object.fromEntries(Object.entries(step.metadata ?? {}).map(([k, v]) => [k, this.valueOf(v)]));
        return c.threads.createThread(create(CreateThreadRequestSchema, {
          namespace: c.namespace, threadId: t, metadata, ifExists: policy[step.if_exists ?? "error"],
        }));
      }
      case "get_thread":
        return c.getThread(t);
      case "update_thread":
        return c.updateThread(t, { setMetadata: meta("set_metadata"), etag: step.etag ? this.saved[step.etag.saved] : "" });
      case "delete_thread":
        return c.deleteThread(t);
      case "put": {
        const channels: Record<string, any> = {};
        for (const [name, spec] of Object.entries(expandChannels(step.channels))) {
          channels[name] = "raw" in (spec as any)
            ? { op: { case: "value", value: this.valueOf(spec) } }
            : channelWrite(this.writeOf(spec), `channels['${name}']`);
        }
        const metadata = Object.fromEntries(Object.entries(step.metadata ?? {}).map(([k, v]) => [k, this.valueOf(v)]));
        const etag = step.expected_head_etag;
        return c.threads.putCheckpoint(create(PutCheckpointRequestSchema, {
          namespace: c.namespace, threadId: t, checkpointNs: step.ns ?? "", checkpointId: step.id ?? "",
          parentCheckpointId: step.parent ?? "", requireThread: step.require_thread ?? false, channels, metadata,
          schema: step.schema ?? "", schemaVersion: step.schema_version ?? 0,
          expectedHeadEtag: etag === undefined ? undefined : typeof etag === "object" ? this.saved[etag.saved] : etag,
        }));
      }
      case "put_writes":
        return c.threads.putWrites(create(PutWritesRequestSchema, {
          namespace: c.namespace, threadId: t, checkpointNs: step.ns ?? "", checkpointId: step.id,
          writes: step.writes.map((w: any) => ({ taskId: w.task, idx: w.idx, channel: w.channel, taskPath: w.path ?? "", value: this.valueOf(w.value) })),
        }));
      case "get":
        return c.getCheckpoint(t, step.id ?? "", { checkpointNs: step.ns ?? "", includePendingWrites: step.pending ?? false,
          readSchemaVersion: step.read_schema_version ?? 0 });
      case "list": {
        const out: Checkpoint[] = [];
        for await (const cp of c.listCheckpoints(t, {
          checkpointNs: step.ns, metadataFilter: meta("filter"), before: step.before ?? "", limit: step.limit ?? 0, pageSize: step.page_size ?? 0,
        })) out.push(cp);
        return out;
      }
      case "diff":
        return c.diff(t, step.from, step.to, { checkpointNs: step.ns ?? "" });
      case "copy_thread":
        return c.copyThread(Runner.thread(step.source), Runner.thread(step.target));
      case "prune":
        return c.prune(step.threads.map(Runner.thread), { keepLatest: step.keep_latest });
      case "append_items":
        return c.conversations.append(t, step.items.map((it: any) => ({
          kind: ITEM_KINDS[it.kind as KindName], role: it.role ?? "", callId: it.call_id ?? "", toolName: it.tool_name ?? "",
          clientItemId: it.client_item_id ?? "", content: this.valueOf(it.content),
          schema: it.schema ?? "", schemaVersion: it.schema_version ?? 0,
          tokens: it.tokens ? { count: it.tokens[0], tokenizer: it.tokens[1], exact: it.tokens[2] } : undefined,
        })), { expectedLastSeq: step.expected_last_seq, createThread: step.create_thread ?? false,
          readSchemaVersion: step.read_schema_version ?? 0 });
      case "set_compaction_policy": {
        const p = step.policy;
        return c.conversations.setCompactionPolicy({ triggerItems: p.trigger_items, compactItems: p.compact_items,
          keepLastItems: p.keep_last_items, fallbackAfterMs: p.fallback_after_ms }, { threadId: t });
      }
      case "pop_item":
        return c.conversations.pop(t);
      case "latest":
        return c.conversations.latest(t, step.n, { readSchemaVersion: step.read_schema_version ?? 0 });
      case "get_context":
        return this.getContext(c, t, step);
      case "set_pin":
        return c.conversations.stub.setPinnedItem({
          namespace: c.namespace, scope: ConfigScope.THREAD, threadId: t, pinId: step.pin_id,
          kind: ITEM_KINDS[step.kind as KindName], role: step.role ?? "", position: step.position ?? 0,
          content: this.valueOf(step.content),
          tokens: step.tokens ? { count: step.tokens[0], tokenizer: step.tokens[1], exact: step.tokens[2] } : undefined,
        });
      case "memory_put":
        return c.memory.put(step.path, step.key, fromDesc(resolveDesc(step.value)) as Record<string, unknown>,
          step.vectors ? { vectors: step.vectors } : {});
      case "memory_search":
        return c.memory.search(step.prefix, { filter: filterOf(step), vector: step.vector, order: step.order, limit: step.limit ?? 100 });
      case "memory_list": {
        const out: string[][] = [];
        for await (const p of c.memory.listNamespaces({ prefix: step.prefix, maxDepth: step.max_depth })) out.push(p);
        return out;
      }
      case "same_roots":
        return Promise.all([
          c.getCheckpoint(Runner.thread(step.a.thread), step.a.id, { omitValues: true }),
          c.getCheckpoint(Runner.thread(step.b.thread), step.b.id, { omitValues: true }),
        ]);
    }
    throw new Error(`unknown op ${step.op}`);
  }

  /** A MigrationStep of a scenario (runner.py's step_of). */
  stepOf(d: any): MessageInitShape<typeof MigrationStepSchema> {
    if ("rename" in d) return migrationSteps.rename(d.rename, d.to);
    if ("convert" in d) return migrationSteps.convert(d.convert, d.to);
    if ("nest" in d) return migrationSteps.nest(d.nest, d.into);
    if ("add" in d) return migrationSteps.add(d.add, fromDesc(resolveDesc(d.default)));
    throw new Error(`unknown migration step ${JSON.stringify(d)}`);
  }

  getContext(c: Client, t: string, step: Step): Promise<GetContextResponse> {
    const mq = step.memory_query;
    return c.conversations.getContext(t, step.budget, { knowledge: this.knowledgeOf(step), tokenizer: step.tokenizer ?? "",
      keepLastItems: step.keep_last_items,
      memoryQuery: mq ? memoryQuery(mq.prefix, { filter: filterOf(mq), vector: mq.vector, order: mq.order, limit: mq.limit ?? 10 }) : undefined });
  }

  knowledgeOf(step: Step): { kind: ItemKind; content: Value }[] {
    return (step.knowledge ?? []).map((d: Desc) => ({ kind: ItemKind.MESSAGE, content: this.valueOf(d) }));
  }

  static contextRecord(thread: string, step: Step, ctx: GetContextResponse): any {
    return { kind: "context", thread, budget: step.budget, hash: hex(ctx.contextHash),
      items: ctx.items.map((i) => [i.source, i.kind, i.role, i.callId, i.toolName, hex(valueBytes(i.content))]) };
  }

  sameValue(got: Value | undefined, desc: Desc, what: string): void {
    const want = encode(fromDesc(resolveDesc(desc)));
    const mine = valueBytes(got);
    this.check(hex(mine) === hex(want), `${what}: value ${hex(mine).slice(0, 80)} != expected ${hex(want).slice(0, 80)}`);
    if (got?.kind.case === "msgpack") {
      this.check(hex(got.kind.value) === hex(mine), `${what}: server bytes differ from the re-encoding`);
    }
  }

  expect(where: string, step: Step, result: any, error: AgentStateError | undefined): void {
    const exp = step.expect ?? {};
    if (exp.error) {
      const e = exp.error;
      if (!error) return this.check(false, `${where}: expected ${JSON.stringify(e)}, call succeeded`);
      this.check(codeName(error.code) === e.code, `${where}: code ${codeName(error.code)} != ${e.code} (${error.message})`);
      if (e.reason !== undefined) this.check(error.reason === e.reason, `${where}: reason ${error.reason} != ${e.reason}`);
      if (e.field !== undefined) this.check(error.field === e.field, `${where}: field ${error.field} != ${e.field}`);
      for (const [k, v] of Object.entries(e.metadata ?? {})) {
        this.check(error.metadata[k] === v, `${where}: metadata ${k}=${error.metadata[k]} != ${v}`);
      }
      return;
    }
    if (error) return this.check(false, `${where}: unexpected error ${error.message} ${JSON.stringify(error.metadata)}`);
    this.passed++;
    const op = step.op;
    if (step.save) this.saved[step.save] = op === "put" ? result.checkpoint.etag : op === "create_thread" ? result.thread.etag : result.etag;
    if ((op === "create_thread" || op === "put") && "created" in exp) this.check(result.created === exp.created, `${where}: created ${result.created}`);
    if (["create_thread", "get_thread", "update_thread"].includes(op) && exp.metadata) {
      const th = op === "create_thread" ? result.thread : result;
      this.check(sameKeys(Object.keys(th.metadata), Object.keys(exp.metadata)), `${where}: metadata keys ${Object.keys(th.metadata)}`);
      for (const [k, d] of Object.entries(exp.metadata)) if (k in th.metadata) this.sameValue(th.metadata[k], d as Desc, `${where}: metadata[${k}]`);
    }
    if (op === "memory_put" && "created" in exp) this.check(result.created === exp.created, `${where}: created ${result.created}`);
    if (op === "memory_search") {
      const keys = result.map((h: any) => [h.item.path.join("/"), h.item.key]);
      this.check(JSON.stringify(keys) === JSON.stringify(exp.keys), `${where}: keys ${JSON.stringify(keys)} != ${JSON.stringify(exp.keys)}`);
    }
    if (op === "memory_list") {
      const paths = result.map((p: string[]) => p.join("/"));
      this.check(JSON.stringify(paths) === JSON.stringify(exp.paths), `${where}: paths ${JSON.stringify(paths)}`);
    }
    if (op === "put_writes") {
      this.check(result.stored === (exp.stored ?? result.stored) && result.kept === (exp.kept ?? result.kept), `${where}: stored/kept ${result.stored}/${result.kept}`);
    }
    if (op === "delete_thread" && "deleted" in exp) this.check(result.deleted === exp.deleted, `${where}: deleted ${result.deleted}`);
    if (op === "copy_thread" && "copied" in exp) this.check(Number(result.copiedCheckpoints) === exp.copied, `${where}: copied ${result.copiedCheckpoints}`);
    if (op === "prune" && "deleted" in exp) this.check(Number(result) === exp.deleted, `${where}: pruned ${result}`);
    if (op === "list") {
      const ids = (result as Checkpoint[]).map((cp) => cp.checkpointId);
      this.check(JSON.stringify(ids) === JSON.stringify(exp.ids), `${where}: ids ${ids} != ${exp.ids}`);
    }
    if (op === "diff") {
      const sorted = [...(result as ChannelChange[])].sort((a, b) => (a.channel < b.channel ? -1 : 1));
      const got = sorted.map((ch, i) => {
        const full: Record<string, unknown> = {
          channel: ch.channel, kind: ChangeKind[ch.kind], lists: ch.lists, appended: ch.appended,
          from_length: Number(ch.fromLength), to_length: Number(ch.toLength), common_prefix: Number(ch.commonPrefix),
        };
        return Object.fromEntries(Object.keys(exp.changes[i] ?? {}).map((k) => [k, full[k]]));
      });
      this.check(JSON.stringify(got) === JSON.stringify(exp.changes), `${where}: changes ${JSON.stringify(got)}`);
    }
    if (op === "same_roots") {
      const [a, b] = result as Checkpoint[];
      const roots = (cp: Checkpoint) => JSON.stringify(Object.entries(cp.channels).map(([k, v]) => [k, hex(v.root)]).sort());
      this.check(roots(a) === roots(b) && Object.keys(a.channels).length > 0, `${where}: roots differ`);
    }
    if (op === "get") this.expectCheckpoint(where, result, exp);
    if (op === "append_items") {
      for (const k of ["last_seq", "duplicates"]) {
        const got = Number(k === "last_seq" ? result.lastSeq : result.duplicates);
        if (k in exp) this.check(got === exp[k], `${where}: ${k} ${got} != ${exp[k]}`);
      }
      if (exp.migrations) {
        const got = JSON.stringify(result.items.map(migrationDesc));
        this.check(got === JSON.stringify(exp.migrations), `${where}: migrations ${got}`);
      }
    }
    if (op === "pop_item" && "seq" in exp) this.check(result !== undefined && Number(result.seq) === exp.seq, `${where}: popped ${result?.seq}`);
    if (op === "latest") {
      const seqs = (result as { seq: bigint }[]).map((i) => Number(i.seq));
      this.check(JSON.stringify(seqs) === JSON.stringify(exp.seqs), `${where}: seqs ${seqs}`);
      if (exp.contents) {
        this.check(result.length === exp.contents.length, `${where}: ${result.length} items`);
        (result as { content?: Value }[]).forEach((x, i) => exp.contents[i] && this.sameValue(x.content, exp.contents[i], `${where}: item ${i} content`));
      }
    }
    if (op === "get_context") {
      this.check(hex(contextHash(result.items)) === hex(result.contextHash), `${where}: context hash computed here differs`);
      this.check(Number(result.totalTokens) <= step.budget, `${where}: over budget`);
      const got = contextDesc(result);
      for (const k of Object.keys(exp)) {
        this.check(JSON.stringify(got[k]) === JSON.stringify(exp[k]), `${where}: ${k} ${JSON.stringify(got[k])} != ${JSON.stringify(exp[k])}`);
      }
    }
  }

  expectCheckpoint(where: string, cp: Checkpoint, exp: any): void {
    if (exp.migration) {
      const got = JSON.stringify(migrationDesc(cp));
      this.check(got === JSON.stringify(exp.migration), `${where}: migration ${got}`);
    }
    if (exp.id !== undefined) this.check(cp.checkpointId === exp.id, `${where}: id ${cp.checkpointId}`);
    if (exp.parent !== undefined) this.check(cp.parentCheckpointId === exp.parent, `${where}: parent ${cp.parentCheckpointId}`);
    if (exp.channels) {
      const want = expandExpected(exp.channels);
      this.check(sameKeys(Object.keys(cp.channels), Object.keys(want)), `${where}: channels ${Object.keys(cp.channels)}`);
      for (const [name, d] of Object.entries(want)) {
        const ch = cp.channels[name];
        if (ch) this.sameValue(ch.content.case === "value" ? ch.content.value : undefined, d as Desc, `${where}: channel ${name}`);
      }
    }
    if (exp.metadata) {
      this.check(sameKeys(Object.keys(cp.metadata), Object.keys(exp.metadata)), `${where}: metadata keys`);
      for (const [k, d] of Object.entries(exp.metadata)) if (cp.metadata[k]) this.sameValue(cp.metadata[k], d as Desc, `${where}: metadata[${k}]`);
    }
    if (exp.pending_writes) {
      const got = cp.pendingWrites.map((w) => [w.taskId, w.idx, w.channel]);
      const want = exp.pending_writes.map((w: any) => [w.task, w.idx, w.channel]);
      this.check(JSON.stringify(got) === JSON.stringify(want), `${where}: pending writes ${JSON.stringify(got)}`);
      cp.pendingWrites.forEach((w, i) => exp.pending_writes[i] && this.sameValue(w.value, exp.pending_writes[i].value, `${where}: write ${w.taskId}/${w.idx}`));
    }
  }

  static recordOf(cp: Checkpoint): any {
    const vb = (v: Value | undefined) => `${v?.kind.case}:${hex(valueBytes(v))}`;
    const sortedEntries = <T>(o: Record<string, T>) => Object.entries(o).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return {
      thread: cp.threadId, ns: cp.checkpointNs, id: cp.checkpointId, etag: cp.etag,
      channels: Object.fromEntries(sortedEntries(cp.channels).map(([k, v]) => [k, { root: hex(v.root), value: vb(v.content.case === "value" ? v.content.value : undefined) }])),
      metadata: Object.fromEntries(sortedEntries(cp.metadata).map(([k, v]) => [k, vb(v)])),
      writes: cp.pendingWrites.map((w) => [w.taskId, w.idx, w.channel, vb(w.value)]),
    };
  }

  codecChecks(): void {
    for (const [name, desc] of Object.entries(VALUES)) {
      const mine = hex(encode(fromDesc(desc)));
      this.check(mine === ENCODINGS[name], `encode ${name}: ${mine} != pinned ${ENCODINGS[name]}`);
      const again = hex(encode(decode(hexToBytes(ENCODINGS[name]))));
      this.check(again === ENCODINGS[name], `decode+encode ${name}: ${again}`);
    }
  }

  async writePass(): Promise<any> {
    this.codecChecks();
    const c = new Client(this.address, { namespace: this.ns(this.lang), autoRequestId: false });
    try {
      for (const sc of SCENARIOS) {
        for (const [i, step] of sc.steps.entries()) {
          const where = `${sc.name}#${i} ${step.op}`;
          let result: any;
          let error: AgentStateError | undefined;
          try {
            result = await this.do(c, step);
          } catch (e) {
            if (!(e instanceof AgentStateError)) throw e;
            error = e;
          }
          this.expect(where, step, result, error);
          if (step.record && !error) {
            this.records[`${sc.name}/${step.record}`] = step.op === "get_context"
              ? Runner.contextRecord(Runner.thread(step.thread), step, result) : Runner.recordOf(result);
          }
        }
      }
    } finally {
      c.close();
    }
    return { lang: this.lang, namespace: this.ns(this.lang), records: this.records };
  }

  async readPass(own: any, peer: any): Promise<void> {
    const steps = new Map<string, Step>();
    for (const sc of SCENARIOS) for (const st of sc.steps) if (st.record) steps.set(`${sc.name}/${st.record}`, st);
    const c = new Client(this.address, { namespace: peer.namespace });
    try {
      for (const label of Object.keys(peer.records).sort()) {
        const rec = peer.records[label];
        const step = steps.get(label)!;
        const where = `read ${peer.lang}:${label}`;
        if (rec.kind === "context") {
          const ctx = await this.getContext(c, rec.thread, step);
          const mine = Runner.contextRecord(rec.thread, step, ctx);
          this.check(stable(mine) === stable(rec), `${where}: context differs from what ${peer.lang} recorded`);
          const ours = own.records[label];
          this.check(ours !== undefined && ours.hash === rec.hash && stable(ours.items) === stable(rec.items),
            `${where}: context bytes or hash differ from ${this.lang}'s own write`);
          this.check(hex(contextHash(ctx.items)) === rec.hash, `${where}: hash recomputed here differs`);
          continue;
        }
        const cp = await c.getCheckpoint(rec.thread, rec.id, { checkpointNs: rec.ns, includePendingWrites: step.pending ?? false });
        this.expectCheckpoint(where, cp, step.expect ?? {});
        const mine = Runner.recordOf(cp);
        this.check(stable(mine) === stable(rec), `${where}: checkpoint differs from what ${peer.lang} recorded`);
        const ours = own.records[label];
        const roots = (r: any) => stable(Object.fromEntries(Object.entries(r.channels).map(([k, v]: [string, any]) => [k, v.root])));
        this.check(ours !== undefined && roots(ours) === roots(rec), `${where}: root hashes differ from ${this.lang}'s own write`);
        this.check(ours !== undefined && ours.etag === rec.etag, `${where}: etag differs from ${this.lang}'s own write`);
        this.check(ours !== undefined && stable(ours.metadata) === stable(rec.metadata) &&
          JSON.stringify(ours.writes.map((w: any[]) => w.slice(1))) === JSON.stringify(rec.writes.map((w: any[]) => w.slice(1))),
          `${where}: metadata or writes differ from ${this.lang}'s own write`);
        for (const [name, ch] of Object.entries(cp.channels)) {
          if (ch.content.case === "value" && ch.content.value.kind.case === "msgpack") {
            this.check(hex(valueBytes(ch.content.value)) === hex(ch.content.value.kind.value), `${where}: ${name} re-encoded differently`);
          }
        }
      }
    } finally {
      c.close();
    }
  }
}

async function main(): Promise<number> {
  const args: Record<string, string> = {};
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) args[argv[i].replace(/^--/, "")] = argv[i + 1];
  const lang = args.lang ?? "ts";
  const mode = args.mode;
  const r = new Runner(args.address, lang, args.run);
  try {
    if (mode === "write") {
      const data = await r.writePass();
      writeFileSync(join(args.dir, `${lang}.json`), JSON.stringify(data, null, 1));
    } else {
      const own = JSON.parse(readFileSync(join(args.dir, `${lang}.json`), "utf8"));
      for (const peer of (args.peers ?? "").split(",").filter(Boolean)) {
        await r.readPass(own, JSON.parse(readFileSync(join(args.dir, `${peer}.json`), "utf8")));
      }
    }
  } catch (e) {
    r.check(false, `runner stopped: ${(e as Error).stack ?? e}`);
  }
  console.log(`conformance[${lang}/${mode}]: ${r.passed} passed, ${r.failed} failed`);
  return r.failed ? 1 : 0;
}

main().then((code) => process.exit(code));
