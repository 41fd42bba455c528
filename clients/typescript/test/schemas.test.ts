/** SchemaService through the TypeScript client (c.schemas, steps): register, migrate on read, eager migration. */
import { randomUUID } from "node:crypto";
import { afterAll, describe, expect, inject, it } from "vitest";
import { Client, FailedPrecondition, fromValue, item, itemValue, memoryValue, steps as s, toValue } from "../src/index.js";
import { ContextSource, type ConversationItem } from "../src/gen/agentstate/v1/conversations_pb.js";
import { MigrationStatus } from "../src/gen/agentstate/v1/schemas_pb.js";
import type { Checkpoint } from "../src/gen/agentstate/v1/threads_pb.js";

const address = inject("address");
const c = new Client(address, { namespace: `tsschema-${randomUUID().slice(0, 8)}` });
afterAll(() => c.close());

const values = (cp: Checkpoint) => Object.fromEntries(Object.entries(cp.channels).map(
  ([k, v]) => [k, v.content.case === "value" ? fromValue(v.content.value) : undefined]));

describe("schemas", () => {
  it("registers three versions, migrates on read and eagerly", async () => {
    const created = await c.schemas.register("agent", [
      [],
      [s.rename("notes", "memo"), s.add(["profile", "tz"], "UTC"), s.convert(["profile", "age"], "int")],
      [s.mapItems("messages", s.rename("text", "content"))],
    ], { failurePolicy: "fail" });
    expect(created.created).toBe(true);
    expect(created.schema?.latestVersion).toBe(3);
    expect((await c.schemas.get("agent"))?.versions.length).toBe(3);
    const names: string[] = [];
    for await (const x of c.schemas.list()) names.push(x.name);
    expect(names).toEqual(["agent"]);

    const threadId = `t-${randomUUID()}`;
    const v1 = { profile: { age: "36" }, notes: "n", messages: [{ text: "hi" }] };
    await c.threads.putCheckpoint({
      namespace: c.namespace, threadId, checkpointId: "c1", schema: "agent", schemaVersion: 1,
      channels: Object.fromEntries(Object.entries(v1).map(([k, v]) => [k, { op: { case: "value", value: toValue(v) } }])),
    });
    const v3 = { profile: { age: 36, tz: "UTC" }, memo: "n", messages: [{ content: "hi" }] };
    const cp = (await c.threads.getCheckpoint({ namespace: c.namespace, threadId, readSchemaVersion: 3 })).checkpoint!;
    expect(values(cp)).toEqual(v3);
    expect([cp.migration, cp.schemaVersion, cp.storedSchemaVersion]).toEqual([MigrationStatus.MIGRATED, 3, 1]);
    await expect(c.threads.getCheckpoint({ namespace: c.namespace, threadId, readSchemaVersion: 9 }))
      .rejects.toMatchObject({ reason: "SCHEMA_NOT_FOUND" });

    const progress = [];
    for await (const p of c.schemas.migrateThread(threadId, "agent")) progress.push(p);
    expect(progress.at(-1)?.checkpointsMigrated).toBe(1n);
    const stored = (await c.threads.getCheckpoint({ namespace: c.namespace, threadId })).checkpoint!;
    expect([values(stored), stored.schemaVersion]).toEqual([v3, 3]);
  });

  it("fails with its own reason under the FAIL policy", async () => {
    await c.schemas.register("strict", [[], [s.convert("n", "int")]]);
    const threadId = `t-${randomUUID()}`;
    await c.threads.putCheckpoint({ namespace: c.namespace, threadId, schema: "strict", schemaVersion: 1,
      channels: { n: { op: { case: "value", value: toValue("not a number") } } } });
    const err = await c.threads.getCheckpoint({ namespace: c.namespace, threadId, readSchemaVersion: 2 })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(FailedPrecondition);
    expect(err).toMatchObject({ reason: "SCHEMA_MIGRATION_FAILED" });
  });
});

/** The typed readSchemaVersion options of the wrappers: a value stored at v1 of a three-version schema read at v3. */
describe("readSchemaVersion options", () => {
  const MSG = [
    [],
    [s.rename("text", "content"), s.convert("tokens", "int")],
    [s.nest(["content", "tokens"], "body"), s.add("lang", "en")],
  ];
  const v1 = { text: "hi", tokens: "2" };
  const v3 = { body: { content: "hi", tokens: 2 }, lang: "en" };
  const bad = { text: "bad", tokens: "many" };
  const status = (x: { migration: MigrationStatus; schemaVersion: number; storedSchemaVersion: number }) =>
    [x.migration, x.schemaVersion, x.storedSchemaVersion];
  const failed = async (p: Promise<unknown>, reason = "SCHEMA_MIGRATION_FAILED") => {
    const err = await p.then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(FailedPrecondition);
    expect(err).toMatchObject({ reason, metadata: { schema: "tsmsg" } });
  };

  it("checkpoints: getCheckpoint, getValues, listCheckpoints and diff read at v3", async () => {
    await c.schemas.register("tsmsg", MSG, { failurePolicy: "degrade" });
    const t = `t-${randomUUID()}`;
    await c.putCheckpoint(t, v1, { checkpointId: "c1", schema: "tsmsg", schemaVersion: 1 });
    await c.putCheckpoint(t, v3, { checkpointId: "c2", parentId: "c1", schema: "tsmsg", schemaVersion: 3 });
    const cp = await c.getCheckpoint(t, "c1", { readSchemaVersion: 3 });
    expect([values(cp), ...status(cp)]).toEqual([v3, MigrationStatus.MIGRATED, 3, 1]);
    expect(values(await c.getCheckpoint(t, "c1"))).toEqual(v1);
    expect(await c.getValues(t, "c1", { readSchemaVersion: 2 })).toEqual({ content: "hi", tokens: 2 });
    const listed: Checkpoint[] = [];
    for await (const x of c.listCheckpoints(t, { includeValues: true, readSchemaVersion: 3 })) listed.push(x);
    expect(listed.map((x) => [x.checkpointId, values(x), x.migration])).toEqual([
      ["c2", v3, MigrationStatus.CURRENT], ["c1", v3, MigrationStatus.MIGRATED]]);
    expect((await c.diff(t, "c1", "c2")).length).toBeGreaterThan(0);
    expect(await c.diff(t, "c1", "c2", { readSchemaVersion: 3 })).toEqual([]);
  });

  it("memory: get, search and history read at v3", async () => {
    const path = ["users", randomUUID().slice(0, 8)];
    await c.memory.put(path, "k", v1, { schema: "tsmsg", schemaVersion: 1 });
    const got = (await c.memory.get(path, "k", { readSchemaVersion: 3 }))!;
    expect([memoryValue(got), got.migration, got.schemaVersion]).toEqual([v3, MigrationStatus.MIGRATED, 3]);
    expect(memoryValue(await c.memory.get(path, "k"))).toEqual(v1);
    const hits = await c.memory.search(path, { readSchemaVersion: 3 });
    expect(hits.map((h) => memoryValue(h.item))).toEqual([v3]);
    const revs = [];
    for await (const r of c.memory.history(path, "k", { includeValues: true, readSchemaVersion: 3 })) revs.push(r);
    expect(revs.map((r) => [fromValue(r.value), r.migration])).toEqual([[v3, MigrationStatus.MIGRATED]]);
  });

  it("conversations: append's answer, list, latest, get and getContext read at v3", async () => {
    const t = `t-${randomUUID()}`;
    const resp = await c.conversations.append(t, [item("message", v1, { role: "user", clientItemId: "a", schema: "tsmsg", schemaVersion: 1 })],
      { createThread: true, readSchemaVersion: 3 });
    expect(resp.items.map(status)).toEqual([[MigrationStatus.MIGRATED, 3, 1]]);
    const plain = await c.conversations.append(t, [item("message", v3, { role: "user", clientItemId: "a", schema: "tsmsg", schemaVersion: 3 })]);
    expect([plain.duplicates, ...status(plain.items[0])]).toEqual([1, MigrationStatus.UNSPECIFIED, 1, 1]);
    const listed: ConversationItem[] = [];
    for await (const x of c.conversations.list(t, { readSchemaVersion: 3 })) listed.push(x);
    expect(listed.map((x) => [itemValue(x), ...status(x)])).toEqual([[v3, MigrationStatus.MIGRATED, 3, 1]]);
    expect((await c.conversations.latest(t, 1, { readSchemaVersion: 2 })).map(itemValue)).toEqual([{ content: "hi", tokens: 2 }]);
    expect((await c.conversations.get(t, [], ["a"], { readSchemaVersion: 3 })).items.map(itemValue)).toEqual([v3]);
    expect((await c.conversations.get(t, [1])).items.map(itemValue)).toEqual([v1]);
    const ctx = await c.conversations.getContext(t, 10_000, { readSchemaVersion: 3 });
    expect(ctx.items.filter((x) => x.source === ContextSource.ITEM).map((x) => [fromValue(x.content), x.migration]))
      .toEqual([[v3, MigrationStatus.MIGRATED]]);
  });

  it("a FAIL policy rejects every read with FailedPrecondition and its reason", async () => {
    await c.schemas.register("tsmsg", MSG, { failurePolicy: "fail" });
    const t = `t-${randomUUID()}`;
    await c.putCheckpoint(t, bad, { checkpointId: "b1", schema: "tsmsg", schemaVersion: 1 });
    await c.putCheckpoint(t, v3, { checkpointId: "b2", parentId: "b1", schema: "tsmsg", schemaVersion: 3 });
    await failed(c.getCheckpoint(t, "b1", { readSchemaVersion: 3 }));
    await failed((async () => { for await (const _ of c.listCheckpoints(t, { includeValues: true, readSchemaVersion: 3 })) void _; })());
    await failed(c.diff(t, "b1", "b2", { readSchemaVersion: 3 }));
    const path = ["bad", randomUUID().slice(0, 8)];
    await c.memory.put(path, "k", bad, { schema: "tsmsg", schemaVersion: 1 });
    await failed(c.memory.get(path, "k", { readSchemaVersion: 3 }));
    await failed(c.memory.search(path, { readSchemaVersion: 3 }));
    const conv = `t-${randomUUID()}`;
    await c.conversations.append(conv, [item("message", bad, { role: "user", schema: "tsmsg", schemaVersion: 1 })], { createThread: true });
    await failed((async () => { for await (const _ of c.conversations.list(conv, { readSchemaVersion: 3 })) void _; })());
    await failed(c.conversations.get(conv, [1], [], { readSchemaVersion: 3 }));
    await failed(c.conversations.getContext(conv, 10_000, { readSchemaVersion: 3 }));
    await failed(c.conversations.append(conv, [item("message", bad, { role: "user", schema: "tsmsg", schemaVersion: 1 })],
      { readSchemaVersion: 3 }));
    expect((await c.conversations.latest(conv)).length).toBe(1); // the failed append appended nothing
    // under the window: a v1 value is unreadable at any version
    await c.schemas.register("tsmsg", MSG, { failurePolicy: "fail", minReadableVersion: 2 });
    await failed(c.memory.get(path, "k", { readSchemaVersion: 3 }), "SCHEMA_VERSION_UNREADABLE");
  });
});
