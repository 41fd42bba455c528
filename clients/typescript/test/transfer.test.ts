/**
 * c.transfer (TransferService: exportNamespace, importNamespace) between two serving sidecars, and
 * c.resumeThread (ThreadService.ResumeThread, the schema NEW_RUN policy).
 */
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, inject, it } from "vitest";
import {
  AlreadyExists,
  Append,
  Client,
  FailedPrecondition,
  InvalidArgument,
  NotFound,
  decode,
  decodeMap,
  encodeMap,
  fileNamespace,
  fromValue,
  steps as s,
  toValue,
} from "../src/index.js";
import { MigrationStatus } from "../src/gen/agentstate/v1/schemas_pb.js";
import type { Checkpoint } from "../src/gen/agentstate/v1/threads_pb.js";
import { Sidecar } from "./sidecar.js";

const NS = `tsxfer-${randomUUID().slice(0, 8)}`;
const a = new Client(inject("address"), { namespace: NS });
const b = Sidecar.temp();
let bc: Client;
const dir = mkdtempSync(join(tmpdir(), "agentstate-ts-xfer-"));

beforeAll(async () => {
  await b.start();
  bc = new Client(b.address, { namespace: NS });
  await a.createThread("t-b", { metadata: { user: "bob", tier: 1 } });
  const c1 = await a.putCheckpoint("t-a", { messages: [{ role: "user", content: "hi" }], n: 1 }, { checkpointId: "c1", metadata: { step: 0 } });
  await a.putCheckpoint("t-a", { messages: new Append([{ role: "ai", content: "hello" }]), doc: "x".repeat(70_000) },
    { checkpointId: "c2", parentId: c1.checkpoint!.checkpointId });
  await a.putWrites("t-a", "c2", [{ taskId: "task-1", idx: 0, channel: "n", value: 5 }]);
  await a.putCheckpoint("t-c", { v: [1, 2, 3] }, { checkpointId: "s1", checkpointNs: "sub" });
  await a.memory.put(["users", "ann"], "prefs", { theme: "dark" });
});

afterAll(async () => {
  a.close();
  bc?.close();
  await b.stop();
  b.cleanup();
  rmSync(dir, { recursive: true, force: true });
});

/** Every read of the namespace this test seeds, as comparable values (store-local etags left out). */
async function reads(c: Client): Promise<unknown> {
  const out: Record<string, unknown> = {};
  const threads = [];
  for await (const t of c.listThreads()) threads.push([t.threadId, decodeMapOf(t.metadata)]);
  out.threads = threads.sort();
  for (const [tid] of threads as [string][]) {
    const cps: unknown[] = [];
    for await (const cp of c.listCheckpoints(tid, { includeValues: true, includePendingWrites: true })) cps.push(view(cp));
    out[tid] = cps;
  }
  const item = await c.memory.get(["users", "ann"], "prefs");
  out.memory = item?.value && fromValue(item.value);
  return out;
}

const decodeMapOf = decodeMap;

function view(cp: Checkpoint): unknown {
  return {
    id: cp.checkpointId, ns: cp.checkpointNs, parent: cp.parentCheckpointId, metadata: decodeMapOf(cp.metadata),
    channels: Object.fromEntries(Object.entries(cp.channels).map(([k, v]) => [k, v.content.case === "value" ? fromValue(v.content.value) : v.content.case])),
    writes: cp.pendingWrites.map((w) => [w.taskId, w.idx, w.channel]),
  };
}

function frames(data: Uint8Array): Uint8Array[] {
  const out = [];
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  for (let pos = 0; pos < data.length;) {
    const n = view.getUint32(pos);
    out.push(data.subarray(pos + 4, pos + 4 + n));
    pos += 4 + n;
  }
  return out;
}

describe("transfer", () => {
  it("exports as bytes and to a file, the same file but its time, and imports into a second sidecar", async () => {
    const phases: string[] = [];
    const { data, summary } = await a.transfer.exportNamespace(undefined, { progress: (p) => phases.push(p) });
    expect(summary.threads).toBe(3n);
    expect(BigInt(data!.length)).toBe(summary.bytes);
    expect(phases.length).toBeGreaterThan(0);
    expect(fileNamespace(data!)).toBe(NS);
    const path = join(dir, "a.asx");
    const toFile = await a.transfer.exportNamespace(NS, { to: path, chunkBytes: 4096 });
    expect(toFile.data).toBeUndefined();
    expect(readdirSync(dir)).toEqual(["a.asx"]); // no temporary file left
    const onDisk = readFileSync(path);
    expect(BigInt(onDisk.length)).toBe(toFile.summary.bytes);
    const [x, y] = [frames(data!), frames(onDisk)];
    expect(x.length).toBe(y.length);
    expect(x.length).toBeGreaterThan(5);
    expect(x.slice(1, -1)).toEqual(y.slice(1, -1));
    const [hx, hy] = [decode(x[0]) as Record<string, unknown>, decode(y[0]) as Record<string, unknown>];
    expect(typeof hx.created).toBe("string");
    delete hx.created;
    delete hy.created;
    expect(hx).toEqual(hy);
    // an export never overwrites
    await expect(a.transfer.exportNamespace(NS, { to: path })).rejects.toThrow(/exists/);
    expect(readFileSync(path)).toEqual(onDisk);

    const source = await reads(a);
    expect(source).toMatchObject({ memory: { theme: "dark" } });
    expect((source as Record<string, unknown[]>)["t-a"].length).toBe(2);
    const checked = await bc.transfer.importNamespace(path, { checkOnly: true });
    expect(checked.threads).toBe(3n);
    expect(await reads(bc)).toEqual({ threads: [], memory: undefined }); // check only: nothing written
    const sent: number[] = [];
    const r = await bc.transfer.importNamespace(path, { progress: (_p, done) => sent.push(done) });
    expect([r.namespace, r.threads, r.replaced, r.bytes, r.blake3]).toEqual([NS, 3n, 0n, toFile.summary.bytes, toFile.summary.blake3]);
    expect(sent.at(-1)).toBe(onDisk.length);
    expect(await reads(bc)).toEqual(source);
    await expect(bc.transfer.importNamespace(data!)).rejects.toBeInstanceOf(AlreadyExists);
    const again = await bc.transfer.importNamespace(data!, { replace: true });
    expect(again.replaced).toBe(3n);
    expect(await reads(bc)).toEqual(source);
    // into another namespace, from the bytes
    const other = `${NS}-copy`;
    await bc.transfer.importNamespace(data!, { namespace: other });
    const oc = new Client(b.address, { namespace: other });
    try {
      expect(await reads(oc)).toEqual(source);
    } finally {
      oc.close();
    }
  });

  it("refuses a damaged file and a missing thread, writing nothing", async () => {
    const { data } = await a.transfer.exportNamespace(NS, { threadId: "t-b" });
    const bad = Uint8Array.from(data!);
    bad[Math.floor(bad.length / 2)] ^= 1;
    const ns = `${NS}-bad`;
    await expect(bc.transfer.importNamespace(bad, { namespace: ns })).rejects.toMatchObject({ reason: "EXPORT_FILE_INVALID" });
    await expect(bc.transfer.importNamespace(bad.subarray(0, bad.length - 10), { namespace: ns }))
      .rejects.toBeInstanceOf(InvalidArgument);
    const nc = new Client(b.address, { namespace: ns });
    try {
      const threads = [];
      for await (const t of nc.listThreads()) threads.push(t);
      expect(threads).toEqual([]);
    } finally {
      nc.close();
    }
    const to = join(dir, "none.asx");
    await expect(a.transfer.exportNamespace(NS, { threadId: "no-such", to })).rejects.toBeInstanceOf(NotFound);
    expect(existsSync(to)).toBe(false);
    expect(readdirSync(dir).filter((f) => f.startsWith(".export"))).toEqual([]);
    const junk = join(dir, "junk.asx");
    writeFileSync(junk, "not an export file");
    await expect(bc.transfer.importNamespace(junk)).rejects.toThrow(/not an export file/);
  });
});

describe("resumeThread", () => {
  const c = new Client(inject("address"), { namespace: `tsresume-${randomUUID().slice(0, 8)}` });
  afterAll(() => c.close());

  const put = (threadId: string, checkpointId: string, parent: string, values: Record<string, unknown>, schema: string, schemaVersion: number) =>
    c.threads.putCheckpoint({
      namespace: c.namespace, threadId, checkpointId, parentCheckpointId: parent, schema, schemaVersion,
      channels: Object.fromEntries(Object.entries(values).map(([k, v]) => [k, { op: { case: "value", value: toValue(v) } }])),
    });

  async function badChain(threadId: string, schema: string) {
    await put(threadId, "c1", "", { age: "36" }, schema, 1);
    await put(threadId, "c2", "c1", { age: "thirty-six" }, schema, 1);
  }

  it("creates the linked run under NEW_RUN, once per request id, and none otherwise", async () => {
    await c.schemas.register("agent", [[], [s.convert("age", "int")]], { failurePolicy: "new_run" });
    const threadId = `t-${randomUUID()}`;
    await badChain(threadId, "agent");
    const opts = { requestId: "r-1", run: { metadata: encodeMap({ who: "worker-2" }, "metadata") } };
    const got = await c.resumeThread(threadId, 2, opts);
    expect([got.checkpoint.checkpointId, got.checkpoint.migration, got.checkpoint.unmigratableCheckpointId])
      .toEqual(["c1", MigrationStatus.NEW_RUN, "c2"]);
    const run = got.run!.run!;
    expect([run.threadId, run.startCheckpointId]).toEqual([threadId, "c1"]);
    const meta = decodeMapOf(run.metadata);
    expect([meta.new_run_from, meta.schema, meta.schema_version, meta.who]).toEqual(["c2", "agent", 2, "worker-2"]);
    expect(got.held?.runId).toBe(run.runId);
    const again = await c.resumeThread(threadId, 2, opts); // the same request again: the first answer
    expect(again.run?.lease?.leaseId).toBe(got.run!.lease!.leaseId);
    expect(again.run?.run?.runId).toBe(run.runId);
    expect((await c.runs.listRuns({ namespace: c.namespace, threadId })).runs.map((r) => r.runId)).toEqual([run.runId]);
    await got.held!.complete();

    await c.schemas.register("strict", [[], [s.convert("age", "int")]], { failurePolicy: "fail" });
    const other = `t-${randomUUID()}`;
    await badChain(other, "strict");
    await expect(c.resumeThread(other, 2)).rejects.toBeInstanceOf(FailedPrecondition);
    const good = `t-${randomUUID()}`;
    await put(good, "g1", "", { age: 36 }, "agent", 2);
    const current = await c.resumeThread(good, 2);
    expect([current.checkpoint.migration, current.run, current.held]).toEqual([MigrationStatus.CURRENT, undefined, undefined]);
    for (const t of [other, good]) {
      const runs = await c.runs.listRuns({ namespace: c.namespace, threadId: t });
      expect(runs.runs).toEqual([]);
    }
  });
});
