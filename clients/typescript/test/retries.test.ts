/**
 * The table of what is safe to repeat (src/retries.ts): every RPC, the same as
 * docs/clients.md, and the stubs retry by it; keepAlive tells a lost run from a sidecar
 * that is away; a held run rides out sidecar restarts (SIGKILL, restart on the same data).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { DescService } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import {
  AgentStateError,
  Client,
  LeaseExpired,
  RULES,
  ruleLabel,
  ruleOf,
  safeAsSent,
} from "../src/index.js";
import { prepare } from "../src/retries.js";
import { ThreadService } from "../src/gen/agentstate/v1/threads_pb.js";
import { AdminService } from "../src/gen/agentstate/v1/admin_pb.js";
import { RunService, RunStatus } from "../src/gen/agentstate/v1/runs_pb.js";
import { EventService } from "../src/gen/agentstate/v1/events_pb.js";
import { ArtifactService } from "../src/gen/agentstate/v1/artifacts_pb.js";
import { EffectService, EffectState } from "../src/gen/agentstate/v1/effects_pb.js";
import { ConversationService } from "../src/gen/agentstate/v1/conversations_pb.js";
import { MemoryService } from "../src/gen/agentstate/v1/memory_pb.js";
import { RetentionService } from "../src/gen/agentstate/v1/retention_pb.js";
import { SchemaService } from "../src/gen/agentstate/v1/schemas_pb.js";
import { TransferService } from "../src/gen/agentstate/v1/transfer_pb.js";
import { REPO, Sidecar } from "./sidecar.js";

const SERVICES = [ThreadService, AdminService, RunService, EventService, ArtifactService, EffectService,
  ConversationService, MemoryService, RetentionService, SchemaService, TransferService] as unknown as DescService[];
const method = (service: DescService, name: string) => service.methods.find((m) => m.name === name)!;

/** The rows of docs/clients.md "Which calls are retried": RPC -> rule. */
function docsTable(): Map<string, string> {
  const text = readFileSync(join(REPO, "docs", "clients.md"), "utf8");
  const section = text.slice(text.indexOf("## Which calls are retried")).split("\n## ")[0];
  const rows = new Map<string, string>();
  for (const line of section.split("\n")) {
    const m = /^\| `(\w+\.\w+)` \| ([^|]+) \| .+ \|$/.exec(line);
    if (m) rows.set(m[1], m[2].trim());
  }
  return rows;
}

describe("which calls are safe to repeat", () => {
  it("the table has every RPC, and docs/clients.md shows the same decisions", () => {
    const rpcs = SERVICES.flatMap((s) => s.methods.map((m) => `${s.name}.${m.name}`));
    expect(Object.keys(RULES).sort()).toEqual([...rpcs].sort());
    for (const s of SERVICES) for (const m of s.methods) expect(ruleOf(m)).toBe(RULES[`${s.name}.${m.name}`]);
    const docs = docsTable();
    expect([...docs.keys()].sort()).toEqual([...rpcs].sort());
    for (const [name, rule] of Object.entries(RULES)) expect([name, ruleLabel(rule)]).toEqual([name, docs.get(name)]);
  });

  it("decisions: by lease, by token, by key without request ids; the rest get one", () => {
    const uuid = () => "u-1";
    expect(safeAsSent(method(RunService as never, "Heartbeat"), { runId: "r", leaseId: "l" })).toBe(true);
    expect(safeAsSent(method(EffectService as never, "BeginEffect"), {})).toBe(true);
    expect(safeAsSent(method(EffectService as never, "CompleteEffect"), {})).toBe(true);
    expect(safeAsSent(method(EffectService as never, "FailEffect"), {})).toBe(true);
    const append = method(EventService as never, "AppendEvents");
    expect(safeAsSent(append, { events: [{ clientEventId: "a" }, { clientEventId: "b" }] })).toBe(true);
    expect(safeAsSent(append, { events: [{ clientEventId: "a" }, { clientEventId: "" }] })).toBe(false);
    const put = method(ThreadService as never, "PutCheckpoint");
    expect(safeAsSent(put, { checkpointId: "c", steps: [{ stepId: "s" }], events: [] })).toBe(true);
    expect(safeAsSent(put, { checkpointId: "c", steps: [{ stepId: "" }], events: [] })).toBe(false);
    expect(safeAsSent(method(ThreadService as never, "CreateThread"), { threadId: "", ifExists: 2 })).toBe(false);
    // a write that needs a request id gets one, on a copy; one that is safe as sent is left alone
    const complete = method(RunService as never, "CompleteRun");
    const req = { $typeName: "agentstate.v1.CompleteRunRequest", namespace: "", runId: "r", leaseId: "l", interrupted: false, requestId: "" };
    const prepared = prepare(complete, req as never, uuid);
    expect([prepared.retry, (prepared.request as { requestId: string }).requestId, req.requestId]).toEqual([true, "u-1", ""]);
    expect(prepare(complete, req as never).retry).toBe(false); // autoRequestId off: not retried
    const hb = { runId: "r", leaseId: "l" };
    expect(prepare(method(RunService as never, "Heartbeat"), hb, uuid)).toEqual({ request: hb, retry: true });
  });

  it("a safe call waits for a sidecar that is not up yet (no retry settings needed)", async () => {
    const late = Sidecar.temp();
    const client = new Client(late.address, { namespace: "late" });
    try {
      const pending = client.storeStats();
      await new Promise((r) => setTimeout(r, 800));
      late.spawn();
      expect((await pending).formatVersion).not.toBe("");
    } finally {
      client.close();
      await late.stop();
      late.cleanup();
    }
  });
});

describe("a held run and sidecar restarts", () => {
  it("keepAlive, effects and checkpoints ride out 3 SIGKILL restarts within the lease (8 s: a restart takes about 0.5 s, over 3 s on 2 busy cores); every effect applies once", async () => {
    const sc = Sidecar.temp();
    sc.extraArgs = ["--watchdog-interval", "0.05"];
    await sc.start();
    const c = new Client(sc.address);
    const applied: string[] = [];
    const outages: number[] = [];
    let restarting = true;
    try {
      const held = await c.startRun("catalog", { createThread: true, leaseTimeout: { seconds: 8n } });
      const ka = held.keepAlive(200);
      const restarts = (async () => {
        for (let i = 0; i < 3; i++) {
          await new Promise((r) => setTimeout(r, 300));
          const start = performance.now();
          await sc.kill();
          await sc.start();
          outages.push(performance.now() - start);
        }
        restarting = false;
      })();
      let parent = "";
      let batch = 0;
      for (; restarting || batch < 2; batch++) {
        expect(held.lost).toBeUndefined();
        const effects = [];
        for (let i = 0; i < 5; i++) {
          const key = `price:${batch}:${i}`;
          const began = await held.beginEffect(key, { requestDigest: key });
          expect(held.lost).toBeUndefined();
          expect(began.effect!.state).toBe(EffectState.PENDING);
          applied.push(key);
          effects.push({ idempotencyKey: key, token: began.token });
        }
        await c.runs.getRun({ namespace: c.namespace, runId: held.runId }); // a read between batches
        const put = await held.putCheckpoint({ progress: batch + 1 }, { parentId: parent, effects });
        parent = put.checkpoint!.checkpointId;
      }
      await restarts;
      expect(ka.lost).toBeUndefined();
      await held.complete({ batches: batch });
      await ka.done;
      expect(outages.length).toBe(3);
      expect(Math.max(...outages)).toBeLessThan(8000);
      expect(new Set(applied).size).toBe(applied.length);
      const done = await c.effects.listEffects({ namespace: c.namespace, threadId: "catalog", pageSize: 1000 });
      expect(done.effects.map((e) => e.idempotencyKey).sort()).toEqual([...applied].sort());
      expect(done.effects.every((e) => e.state === EffectState.DONE)).toBe(true);
      const run = (await c.runs.getRun({ namespace: c.namespace, runId: held.runId })).run!;
      expect([run.attempt, run.status]).toEqual([1, RunStatus.SUCCESS]);
    } finally {
      c.close();
      await sc.stop();
      sc.cleanup();
    }
  });

  it("keepAlive reports a lease that ran out while the sidecar was away as LeaseExpired", async () => {
    const sc = Sidecar.temp();
    await sc.start();
    const c = new Client(sc.address);
    try {
      const held = await c.startRun("t", { createThread: true, leaseTimeout: { nanos: 600_000_000 } });
      const ka = held.keepAlive(100);
      await sc.kill();
      const start = performance.now();
      await ka.done;
      expect(ka.lost).toBeInstanceOf(LeaseExpired);
      expect((ka.lost as AgentStateError).codeName).toBe("DEADLINE_EXCEEDED");
      expect(performance.now() - start).toBeLessThan(3000);
    } finally {
      c.close();
      sc.cleanup();
    }
  });
});
