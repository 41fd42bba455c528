/** SchemaService through the TypeScript client (c.schemas, steps): register, migrate on read, eager migration. */
import { randomUUID } from "node:crypto";
import { afterAll, describe, expect, inject, it } from "vitest";
import { Client, FailedPrecondition, fromValue, steps as s, toValue } from "../src/index.js";
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
