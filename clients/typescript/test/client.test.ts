import { randomUUID } from "node:crypto";
import { afterAll, describe, expect, inject, it } from "vitest";
import {
  AgentStateError,
  AlreadyExists,
  Append,
  Client,
  DateTime,
  DeadlineExceeded,
  Decimal,
  FailedPrecondition,
  Float,
  InvalidArgument,
  Encoded,
  KEEP,
  Keep,
  NotFound,
  Opaque,
  SetKeys,
  Status,
  Unavailable,
  Uuid,
  decodeMap,
  encode,
  fromValue,
} from "../src/index.js";
import { Sidecar, freePort } from "./sidecar.js";

const address = inject("address");
const ns = `ts-${randomUUID().slice(0, 8)}`;
const c = new Client(address, { namespace: ns });
afterAll(() => c.close());

const tid = () => `t-${randomUUID()}`;

async function expectError(p: Promise<unknown>, cls: Function, code: number, reason: string, field?: string): Promise<AgentStateError> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(cls);
    const err = e as AgentStateError;
    expect([err.codeName, err.reason]).toEqual([Status[code], reason]);
    if (field !== undefined) expect(err.field).toBe(field);
    return err;
  }
  throw new Error("expected an error");
}

describe("threads", () => {
  it("create, get, update with etags, delete", async () => {
    const id = tid();
    const t = await c.createThread(id, { metadata: { owner: "ts", n: 1 } });
    expect(t.threadId).toBe(id);
    expect(decodeMap(t.metadata)).toEqual({ owner: "ts", n: 1 });
    await expectError(c.createThread(id), AlreadyExists, Status.ALREADY_EXISTS, "THREAD_ALREADY_EXISTS");
    const same = await c.createThread(id, { ifExists: "return" });
    expect(same.etag).toBe(t.etag);
    const u = await c.updateThread(id, { setMetadata: { n: 2 }, etag: t.etag });
    expect(decodeMap(u.metadata).n).toBe(2);
    const stale = await expectError(c.updateThread(id, { setMetadata: { n: 3 }, etag: t.etag }), FailedPrecondition,
      Status.FAILED_PRECONDITION, "ETAG_MISMATCH");
    expect(stale.metadata.current_etag).toBe(u.etag);
    expect((await c.deleteThread(id)).deleted).toBe(true);
    await expectError(c.getThread(id), NotFound, Status.NOT_FOUND, "THREAD_NOT_FOUND", "thread_id");
  });

  it("lists threads page by page with an async iterator and a metadata filter", async () => {
    const tag = randomUUID();
    const ids = [];
    for (let i = 0; i < 7; i++) ids.push((await c.createThread(`list-${tag}-${i}`, { metadata: { tag, even: i % 2 === 0 } })).threadId);
    const seen: string[] = [];
    for await (const t of c.listThreads({ metadataFilter: { tag }, pageSize: 2 })) seen.push(t.threadId);
    expect(seen).toEqual(ids);
    const even: string[] = [];
    for await (const t of c.listThreads({ metadataFilter: { tag, even: true }, pageSize: 3 })) even.push(t.threadId);
    expect(even).toEqual(ids.filter((_, i) => i % 2 === 0));
  });

  it("a retried create with the same request_id returns the first result", async () => {
    const rid = randomUUID();
    const a = await c.createThread("", { requestId: rid });
    const b = await c.createThread("", { requestId: rid });
    expect(b.threadId).toBe(a.threadId);
  });
});

describe("checkpoints", () => {
  it("stores every value type and reads it back", async () => {
    const id = tid();
    const state = {
      text: "héllo 🌍 \u4e16\u754c",
      big: 2n ** 70n,
      neg: -(2n ** 63n),
      u64: 2n ** 64n - 1n,
      float: 0.1,
      whole: new Float(2),
      bytes: Uint8Array.of(0, 1, 255),
      when: DateTime.parse("2024-05-01T12:00:00.123456+05:30"),
      zoned: DateTime.parse("2024-07-14T10:00:00[Europe/Paris]"),
      naive: DateTime.parse("2024-02-29T23:59:59.999999"),
      id: Uuid.parse("12345678-1234-5678-1234-567812345678"),
      price: new Decimal("1.10"),
      tags: new Set(["b", "a"]),
      nested: { list: [1, [2, { deep: null }]], flag: true },
      blob: new Opaque("pickle", Uint8Array.of(0x80, 4)),
    };
    const put = await c.putCheckpoint(id, { state, messages: ["one"] }, { metadata: { step: 0, source: "input" } });
    expect(put.created).toBe(true);
    const values = await c.getValues(id);
    expect(values.messages).toEqual(["one"]);
    const got = values.state as typeof state;
    expect(got.text).toBe(state.text);
    expect(got.big).toBe(state.big);
    expect(got.neg).toBe(state.neg);
    expect(got.u64).toBe(state.u64);
    expect(got.float).toBe(0.1);
    expect(got.whole).toEqual(new Float(2));
    expect(got.bytes).toEqual(state.bytes);
    expect(String(got.when)).toBe("2024-05-01T12:00:00.123456+05:30");
    expect(String(got.zoned)).toBe("2024-07-14T10:00:00+02:00[Europe/Paris]");
    expect(String(got.naive)).toBe("2024-02-29T23:59:59.999999");
    expect(String(got.id)).toBe("12345678-1234-5678-1234-567812345678");
    expect(String(got.price)).toBe("1.10");
    expect([...got.tags].sort()).toEqual(["a", "b"]);
    expect(got.nested).toEqual(state.nested);
    expect(got.blob).toEqual(state.blob);
  });

  it("appends deltas, keeps channels, forks, lists with filters, diffs", async () => {
    const id = tid();
    const a = await c.putCheckpoint(id, { messages: ["m0"], cfg: { a: 1 } }, { checkpointId: "0001", metadata: { step: 0 } });
    const b = await c.putCheckpoint(id, { messages: new Append(["m1"]), cfg: new SetKeys({ b: 2 }, ["a"]) },
      { checkpointId: "0002", parentId: "0001", metadata: { step: 1 }, expectedHeadEtag: a.checkpoint!.etag });
    await c.putCheckpoint(id, { messages: new Append(["m2"]), cfg: KEEP }, { checkpointId: "0003", parentId: "0002", metadata: { step: 2 } });
    // A fork from 0002.
    await c.putCheckpoint(id, { messages: new Append(["x2"], { keepFirst: 1 }), cfg: KEEP },
      { checkpointId: "0004", parentId: "0002", metadata: { step: 2, fork: true } });
    expect(await c.getValues(id, "0003")).toEqual({ messages: ["m0", "m1", "m2"], cfg: { b: 2 } });
    expect((await c.getValues(id, "0004")).messages).toEqual(["m0", "x2"]);
    const all: string[] = [];
    for await (const cp of c.listCheckpoints(id, { pageSize: 1 })) all.push(cp.checkpointId);
    expect(all).toEqual(["0004", "0003", "0002", "0001"]);
    const step2: string[] = [];
    for await (const cp of c.listCheckpoints(id, { metadataFilter: { step: 2 } })) step2.push(cp.checkpointId);
    expect(step2).toEqual(["0004", "0003"]);
    const before: string[] = [];
    for await (const cp of c.listCheckpoints(id, { before: "0003", limit: 1 })) before.push(cp.checkpointId);
    expect(before).toEqual(["0002"]);
    const changes = await c.diff(id, "0002", "0003");
    expect(changes.map((ch) => [ch.channel, ch.appended, ch.fromLength, ch.toLength])).toEqual([["messages", true, 2n, 3n]]);
    // A stale head etag is refused.
    await expectError(
      c.putCheckpoint(id, { messages: ["z"] }, { checkpointId: "0005", parentId: "0003", expectedHeadEtag: b.checkpoint!.etag }),
      FailedPrecondition, Status.FAILED_PRECONDITION, "ETAG_MISMATCH");
  });

  it("a delta with a stale base_root fails with BASE_MISMATCH", async () => {
    const id = tid();
    await c.putCheckpoint(id, { messages: ["a"] }, { checkpointId: "1" });
    await expectError(
      c.putCheckpoint(id, { messages: new Append(["b"], { baseRoot: new Uint8Array(32) }) }, { checkpointId: "2", parentId: "1" }),
      FailedPrecondition, Status.FAILED_PRECONDITION, "BASE_MISMATCH");
  });

  it("a keep with a base root is checked against the base; Encoded values are sent as they are", async () => {
    const id = tid();
    const first = await c.putCheckpoint(id, { messages: ["a"], doc: new Opaque("json", new TextEncoder().encode("{}")) }, { checkpointId: "1" });
    const roots = first.checkpoint!.channels;
    const kept = await c.putCheckpoint(id, { messages: new Keep({ baseRoot: roots.messages.root }), doc: new Keep({ baseRoot: roots.doc.root }) },
      { checkpointId: "2", parentId: "1", metadata: { step: new Encoded(encode(1)) }, extra: new Encoded(encode({ v: 4 })) });
    expect(kept.checkpoint!.channels.messages.root).toEqual(roots.messages.root);
    expect(kept.checkpoint!.channels.doc.root).toEqual(roots.doc.root);
    const cp = await c.getCheckpoint(id, "2");
    expect([decodeMap(cp.metadata), fromValue(cp.extra)]).toEqual([{ step: 1 }, { v: 4 }]);
    await expectError(
      c.putCheckpoint(id, { messages: new Keep({ baseRoot: roots.doc.root }) }, { checkpointId: "3", parentId: "1" }),
      FailedPrecondition, Status.FAILED_PRECONDITION, "BASE_MISMATCH", "channels['messages'].delta.base_root");
    await expectError(c.getCheckpoint(id, "3"), NotFound, Status.NOT_FOUND, "CHECKPOINT_NOT_FOUND");
  });

  it("a map channel reads back with its keys in canonical order, every time", async () => {
    const t = tid();
    const keys = ["zeta", "b", "\u00e9t\u00e9", "a", "\u{1F600}", "\uFFFD", "aa"];
    const value: Record<string, unknown> = {};
    for (const k of keys) value[k] = new Opaque("x", new TextEncoder().encode(k));
    await c.putCheckpoint(t, { m: value });
    const values = await c.getValues(t);
    // UTF-8 byte order: U+FFFD before U+1F600 (UTF-16 code units would put the emoji's surrogates first)
    expect(Object.keys(values.m as object)).toEqual(["a", "aa", "b", "zeta", "\u00e9t\u00e9", "\uFFFD", "\u{1F600}"]);
  });

  it("pending writes are stored once per (task, idx) and come back with the checkpoint", async () => {
    const id = tid();
    await c.putCheckpoint(id, { x: 1 }, { checkpointId: "1" });
    const w = [{ taskId: "task", idx: 0, channel: "messages", value: { role: "ai" } }, { taskId: "task", idx: 1, channel: "x", value: 2 }];
    expect(await c.putWrites(id, "1", w)).toMatchObject({ stored: 2, kept: 0 });
    expect(await c.putWrites(id, "1", w)).toMatchObject({ stored: 0, kept: 2 });
    const cp = await c.getCheckpoint(id, "1", { includePendingWrites: true });
    expect(cp.pendingWrites.map((p) => [p.taskId, p.idx, p.channel])).toEqual([["task", 0, "messages"], ["task", 1, "x"]]);
  });

  it("bad requests get INVALID_ARGUMENT naming the field; client-side checks match the server's", async () => {
    await expectError(c.getCheckpoint(""), InvalidArgument, Status.INVALID_ARGUMENT, "INVALID_FIELD", "thread_id");
    await expectError(c.putCheckpoint(tid(), { s: { bad: "\uD800" } }), InvalidArgument, Status.INVALID_ARGUMENT,
      "UNSUPPORTED_VALUE", "channels['s']['bad']");
    // The server's own check of raw bytes: an unknown extension type.
    await expectError(
      c.threads.putCheckpoint({ namespace: ns, threadId: tid(), channels: { x: { op: { case: "value", value: { kind: { case: "msgpack", value: Uint8Array.of(0xd4, 0x09, 0x00) } } } } } }),
      InvalidArgument, Status.INVALID_ARGUMENT, "UNSUPPORTED_VALUE", "channels['x'].value.msgpack");
    await expectError(c.getCheckpoint(tid()), NotFound, Status.NOT_FOUND, "THREAD_NOT_FOUND");
  });
});

describe("addresses", () => {
  it("connects over TCP host:port as well as unix:PATH", async () => {
    const sc = Sidecar.temp();
    const port = await freePort();
    sc.extraListen = [`127.0.0.1:${port}`];
    await sc.start();
    const tcp = new Client(`127.0.0.1:${port}`, { namespace: ns });
    const unix = new Client(sc.address, { namespace: ns });
    try {
      const id = tid();
      await tcp.putCheckpoint(id, { x: "over tcp" });
      expect(await unix.getValues(id)).toEqual({ x: "over tcp" });
    } finally {
      tcp.close();
      unix.close();
      await sc.stop();
      sc.cleanup();
    }
  });
});

describe("deadlines and retries", () => {
  it("a deadline that passes gives DeadlineExceeded", async () => {
    await expectError(c.collectGarbage({ timeoutMs: 1 }), DeadlineExceeded, Status.DEADLINE_EXCEEDED, "");
  });

  it("reads are retried until a server comes up; without retries UNAVAILABLE surfaces", async () => {
    const late = Sidecar.temp();
    const client = new Client(late.address, { retry: { maxAttempts: 100, initialBackoffMs: 100, maxBackoffMs: 300 }, timeoutMs: 30000 });
    try {
      await expectError(client.storeStats({ retry: false }), Unavailable, Status.UNAVAILABLE, "");
      const pending = client.storeStats();
      await new Promise((r) => setTimeout(r, 300));
      late.spawn();
      const stats = await pending;
      expect(stats.formatVersion).not.toBe("");
    } finally {
      client.close();
      await late.stop();
      late.cleanup();
    }
  });
});

describe("README example", () => {
  it("runs as written", async () => {
    const { Client, Append, decodeMap } = await import("../src/index.js");
    const c = new Client(address, { namespace: `readme-${randomUUID()}` });
    const first = await c.putCheckpoint("thread-1", { messages: [{ role: "user", content: "hi" }] }, { metadata: { step: 0 } });
    await c.putCheckpoint("thread-1", { messages: new Append([{ role: "ai", content: "hello" }]) },
      { parentId: first.checkpoint!.checkpointId, metadata: { step: 1 }, expectedHeadEtag: first.checkpoint!.etag, timeoutMs: 5000 });
    expect((await c.getValues("thread-1")).messages).toEqual([{ role: "user", content: "hi" }, { role: "ai", content: "hello" }]);
    const steps: unknown[] = [];
    for await (const cp of c.listCheckpoints("thread-1")) steps.push(decodeMap(cp.metadata).step);
    expect(steps).toEqual([1, 0]);
    c.close();
  });
});

describe("which calls are retried", () => {
  it("reads, writes with a request_id, PutWrites, and PutCheckpoint with an id (with or without a head etag)", async () => {
    const { idempotent } = await import("../src/client.js");
    const { ThreadService } = await import("../src/gen/agentstate/v1/threads_pb.js");
    const m = (name: string) => ThreadService.methods.find((x) => x.name === name)!;
    expect(idempotent(m("GetCheckpoint"), {})).toBe(true);
    expect(idempotent(m("ListThreads"), {})).toBe(true);
    expect(idempotent(m("DeleteThread"), { requestId: "" })).toBe(false);
    expect(idempotent(m("DeleteThread"), { requestId: "r1" })).toBe(true);
    expect(idempotent(m("PutWrites"), { requestId: "" })).toBe(true);
    expect(idempotent(m("PutCheckpoint"), { requestId: "", checkpointId: "c1" })).toBe(true);
    // an identical re-put is answered before the head etag is checked (as the Python client has it)
    expect(idempotent(m("PutCheckpoint"), { requestId: "", checkpointId: "c1", expectedHeadEtag: "e" })).toBe(true);
    expect(idempotent(m("PutCheckpoint"), { requestId: "", checkpointId: "" })).toBe(false);
  });
});
