/**
 * The conversation calls (src/conversations.ts) against the sidecar, the context and compaction hashes
 * recomputed here equal the server's, and SidecarSession (src/agents.ts) side by side with the SDK's
 * MemorySession (fast-check scripts in which the caller mutates returned items) and under the SDK's runner
 * with a fake model and a tool.
 */
import { randomUUID } from "node:crypto";
import * as fc from "fast-check";
import { Agent, MemorySession, Runner, Usage, setTracingDisabled, tool, type AgentInputItem, type Model,
  type ModelRequest, type ModelResponse, type StreamEvent } from "@openai/agents-core";
import { z } from "zod";
import { afterAll, describe, expect, inject, it } from "vitest";
import { AgentStateError, Client, compactionHash, contextHash, item, itemValue, knowledge } from "../src/index.js";
import { SidecarSession, describeItem } from "../src/agents.js";
import { ItemKind } from "../src/gen/agentstate/v1/conversations_pb.js";

setTracingDisabled(true);
const address = inject("address");
const ns = `ts-conv-${randomUUID().slice(0, 8)}`;
const c = new Client(address, { namespace: ns });
afterAll(() => c.close());
const tid = () => `t-${randomUUID()}`;
const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

describe("conversation log", () => {
  it("appends with seqs, reads the latest in order, conditional appends, pop and clear", async () => {
    const t = tid();
    const r = await c.conversations.append(t, [item("message", "hi", { role: "user", clientItemId: "a" }),
      item("message", { x: 1 }, { role: "assistant" })], { createThread: true });
    expect(r.items.map((i) => i.seq)).toEqual([1n, 2n]);
    const again = await c.conversations.append(t, [item("message", "hi", { role: "user", clientItemId: "a" })], { expectedLastSeq: 0 });
    expect(again.duplicates).toBe(1);
    await expect(c.conversations.append(t, [item("message", "x")], { expectedLastSeq: 1 })).rejects.toMatchObject({
      reason: "SEQUENCE_MISMATCH", field: "expected_last_seq" });
    await c.conversations.append(t, [item("message", "third", { role: "user" })], { expectedLastSeq: 2 });
    expect((await c.conversations.latest(t, 2)).map(itemValue)).toEqual([{ x: 1 }, "third"]);
    const popped = await c.conversations.pop(t);
    expect(popped && itemValue(popped)).toBe("third");
    expect((await c.conversations.clear(t)).clearedItems).toBe(2n);
    expect(await c.conversations.pop(t)).toBeUndefined();
    const bad = c.conversations.append(t, [{ kind: ItemKind.TOOL_RESULT, content: item("message", "r").content }]);
    await expect(bad).rejects.toBeInstanceOf(AgentStateError);
    await expect(bad).rejects.toMatchObject({ reason: "INVALID_FIELD", field: "items[0].call_id" });
  });

  it("the context hash and the compaction hash computed here equal the server's", async () => {
    const t = tid();
    await c.conversations.append(t, [], { createThread: true });
    await c.conversations.setCompactionPolicy({ triggerItems: 4, compactItems: 2, keepLastItems: 1 }, { threadId: t });
    await c.conversations.setPin("sys", "message", "You are terse.", { threadId: t, role: "system" });
    await c.conversations.append(t, [
      item("message", "question", { role: "user" }),
      item("tool_call", { arguments: "q=1" }, { callId: "c1", toolName: "search" }),
      item("tool_result", "result ".repeat(30), { callId: "c1" }),
      item("message", "answer", { role: "assistant" }),
      item("message", "thanks", { role: "user" }),
    ]);
    const claim = await c.conversations.claimCompaction({ worker: "ts", threadId: t });
    expect(claim).toBeDefined();
    expect(hex(compactionHash(claim!.compaction!))).toBe(hex(claim!.compaction!.contentHash));
    const done = await c.conversations.submitSummary(claim!, "the user asked", { producer: "ts/test" });
    expect(done.summary!.summaryId).toBe(claim!.compaction!.compactionId);
    const ctx = await c.conversations.getContext(t, 8000, { knowledge: [knowledge("a fact", { label: "k" })] });
    expect(ctx.items.length).toBeGreaterThan(2);
    expect(hex(contextHash(ctx.items))).toBe(hex(ctx.contextHash));
    expect(ctx.totalTokens).toBeLessThanOrEqual(8000n);
  });
});

// ------------------------------------------------------------------ SidecarSession vs MemorySession

const json = fc.letrec((tie) => ({
  v: fc.oneof({ depthSize: "small" }, fc.string({ maxLength: 8 }), fc.integer(), fc.boolean(), fc.constant(null),
    fc.double({ noNaN: true, noDefaultInfinity: true }),
    fc.array(tie("v"), { maxLength: 3 }), fc.dictionary(fc.string({ maxLength: 4 }), tie("v"), { maxKeys: 3 })),
})).v;
const sdkItem = fc.oneof(
  fc.record({ role: fc.constantFrom("user", "assistant"), content: fc.string({ maxLength: 20 }) }),
  fc.record({ type: fc.constant("function_call"), callId: fc.constantFrom("c1", "c2"), name: fc.constant("f"),
    arguments: fc.string({ maxLength: 10 }) }),
  fc.record({ type: fc.constant("function_call_result"), callId: fc.constantFrom("c1", "c2"), name: fc.constant("f"),
    status: fc.constant("completed"), output: fc.record({ type: fc.constant("text"), text: fc.string({ maxLength: 10 }) }) }),
  fc.dictionary(fc.string({ maxLength: 5 }), json, { maxKeys: 4 }),
);
type Op = { op: "add"; items: unknown[] } | { op: "get"; limit?: number } | { op: "pop" } | { op: "clear" } | { op: "mutate"; at: number };
const ops = fc.array(fc.oneof(
  fc.record({ op: fc.constant("add" as const), items: fc.array(sdkItem, { maxLength: 5 }) }),
  fc.record({ op: fc.constant("get" as const), limit: fc.option(fc.integer({ min: -2, max: 7 }), { nil: undefined }) }),
  fc.record({ op: fc.constant("pop" as const) }),
  fc.record({ op: fc.constant("clear" as const) }),
  fc.record({ op: fc.constant("mutate" as const), at: fc.nat(10) }),
), { maxLength: 12 });

/** MemorySession keeps what JSON cannot hold (-0, undefined): compare what a persistent session can keep. */
const norm = (v: unknown) => JSON.parse(JSON.stringify(v ?? null));

describe("SidecarSession", () => {
  it("gives the same results as MemorySession", async () => {
    await fc.assert(fc.asyncProperty(ops, async (script: Op[]) => {
      const ref = new MemorySession();
      const ours = new SidecarSession(`s-${randomUUID()}`, { client: c });
      let lastRef: unknown[] = [];
      let lastOurs: unknown[] = [];
      for (const step of script) {
        if (step.op === "add") {
          await ref.addItems(structuredClone(step.items) as AgentInputItem[]);
          await ours.addItems(structuredClone(step.items) as AgentInputItem[]);
        } else if (step.op === "get") {
          lastRef = await ref.getItems(step.limit);
          lastOurs = await ours.getItems(step.limit);
          expect(norm(lastOurs)).toEqual(norm(lastRef));
        } else if (step.op === "pop") {
          const a = await ref.popItem();
          const b = await ours.popItem();
          expect(norm(b)).toEqual(norm(a));
          lastRef = a === undefined ? [] : [a];
          lastOurs = b === undefined ? [] : [b];
        } else if (step.op === "clear") {
          await ref.clearSession();
          await ours.clearSession();
        } else {
          for (const got of [lastRef, lastOurs]) {
            const x = got[step.at % Math.max(got.length, 1)];
            if (x && typeof x === "object") (x as Record<string, unknown>).mutated = [1];
            else got.push({ appended: true });
          }
        }
      }
      expect(norm(await ours.getItems())).toEqual(norm(await ref.getItems()));
    }), { numRuns: 40 });
  });

  it("describes SDK items to the server", () => {
    expect(describeItem({ role: "user", content: "x" }).kind).toBe(ItemKind.MESSAGE);
    const call = describeItem({ type: "function_call", callId: "c", name: "add", arguments: "{}" });
    expect([call.kind, call.callId, call.toolName]).toEqual([ItemKind.TOOL_CALL, "c", "add"]);
    const a = describeItem({ type: "function_call_result", callId: "c", id: "1", output: { type: "text", text: "3" } });
    const b = describeItem({ type: "function_call_result", callId: "d", id: "2", output: { type: "text", text: "3" } });
    expect(a.kind).toBe(ItemKind.TOOL_RESULT);
    expect(a.dedupeKey).toEqual(b.dedupeKey);
    expect(describeItem({ type: "hosted_tool_call", name: "web_search" }).kind).toBe(ItemKind.TOOL_CALL);
    expect(describeItem({ type: "item_reference", id: "x" }).kind).toBe(ItemKind.OTHER);
  });
});

// ------------------------------------------------------------------ under the runner

class FakeModel implements Model {
  inputs: unknown[] = [];
  calls = 0;

  private output(request: ModelRequest): ModelResponse["output"] {
    this.inputs.push(structuredClone(request.input));
    this.calls += 1;
    const input = request.input as AgentInputItem[];
    const last = Array.isArray(input) ? (input[input.length - 1] as { role?: string } | undefined) : undefined;
    if (typeof request.input === "string" || last?.role === "user") {
      return [{ type: "function_call", callId: `call_${this.calls}`, name: "add", status: "completed",
        arguments: JSON.stringify({ a: this.calls, b: 2 }) }];
    }
    return [{ type: "message", role: "assistant", status: "completed", id: `msg_${this.calls}`,
      content: [{ type: "output_text", text: `seen ${Array.isArray(input) ? input.length : 1} items` }] }];
  }

  async getResponse(request: ModelRequest): Promise<ModelResponse> {
    return { output: this.output(request), usage: new Usage(), responseId: `r_${this.calls}` };
  }

  async *getStreamedResponse(request: ModelRequest): AsyncIterable<StreamEvent> {
    const output = this.output(request);
    yield { type: "response_done", response: { id: `r_${this.calls}`, output,
      usage: { inputTokens: 0, outputTokens: 0, totalTokens: 0 } } } as StreamEvent;
  }
}

const add = tool({ name: "add", description: "Add two numbers", parameters: z.object({ a: z.number(), b: z.number() }),
  execute: async ({ a, b }) => String(a + b) });

describe("SidecarSession under the runner", () => {
  for (const stream of [false, true]) {
    it(`run${stream ? " (streamed)" : ""} with a fake model: the same as MemorySession`, async () => {
      const results: Record<string, { finals: unknown[]; inputs: unknown[]; stored: unknown[] }> = {};
      for (const name of ["ref", "ours"]) {
        const model = new FakeModel();
        const agent = new Agent({ name: "calc", instructions: "add", model, tools: [add] });
        const session = name === "ref" ? new MemorySession() : new SidecarSession(`s-${randomUUID()}`, { client: c });
        const runner = new Runner();
        const finals = [];
        for (const text of ["first", "second"]) {
          if (stream) {
            const res = await runner.run(agent, text, { session, stream: true });
            for await (const _ of res) { /* drain */ }
            await res.completed;
            finals.push(res.finalOutput);
          } else {
            finals.push((await runner.run(agent, text, { session })).finalOutput);
          }
        }
        results[name] = { finals, inputs: model.inputs, stored: await session.getItems() };
      }
      expect(results.ours.finals).toEqual(results.ref.finals);
      expect(results.ours.finals[1]).toBe("seen 7 items");
      expect(norm(results.ours.inputs)).toEqual(norm(results.ref.inputs));
      expect(norm(results.ours.stored)).toEqual(norm(results.ref.stored));
    });
  }
});

describe("SidecarSession compaction", () => {
  it("runCompaction with a summarizer under the runner summarises due ranges, originals kept", async () => {
    const seen: string[] = [];
    const session = new SidecarSession(`s-${randomUUID()}`, { client: c, summarizer: async (comp) => {
      seen.push(comp.compactionId);
      return `summary of ${comp.items.length} items`;
    } });
    expect(typeof session.runCompaction).toBe("function");
    expect(new SidecarSession("x", { client: c }).runCompaction).toBeUndefined();
    await c.conversations.append(session.sessionId, [], { createThread: true });
    await c.conversations.setCompactionPolicy({ triggerItems: 4, compactItems: 2, keepLastItems: 1 }, { threadId: session.sessionId });
    const agent = new Agent({ name: "calc", instructions: "add", model: new FakeModel(), tools: [add] });
    const runner = new Runner();
    for (const text of ["first", "second", "third"]) await runner.run(agent, text, { session });
    const sums = await c.conversations.stub.listSummaries({ namespace: ns, threadId: session.sessionId });
    expect(seen.length).toBeGreaterThan(0);
    expect(sums.summaries.filter((s) => s.level === 1).map((s) => s.summaryId)).toEqual(seen.filter((x) => x.startsWith("L1")));
    expect(sums.summaries.every((s) => s.producer === "@agentstate/client/agents.SidecarSession")).toBe(true);
    expect((await session.getItems()).length).toBe(12);
  });
});

describe("SidecarSession context mode", () => {
  it("feeds the runner GetContext: summaries within the budget, no call without its result", async () => {
    const session = new SidecarSession(`s-${randomUUID()}`, { client: c, contextBudget: 4000 });
    await c.conversations.append(session.sessionId, [], { createThread: true });
    await c.conversations.setCompactionPolicy({ triggerItems: 4, compactItems: 2, keepLastItems: 2, fallbackAfterMs: 0 },
      { threadId: session.sessionId });
    const model = new FakeModel();
    const agent = new Agent({ name: "calc", instructions: "add", model, tools: [add] });
    const runner = new Runner();
    for (const text of ["first", "second", "third"]) await runner.run(agent, text, { session });
    const last = model.inputs[model.inputs.length - 2] as any[]; // the third run's first model call
    expect(last.some((i) => typeof i.content === "string" && i.content.startsWith("Summary of earlier conversation"))).toBe(true);
    const calls = new Set(last.filter((i) => i.type === "function_call").map((i) => i.callId));
    const results = new Set(last.filter((i) => i.type === "function_call_result").map((i) => i.callId));
    expect([...calls].sort()).toEqual([...results].sort());
    expect((await c.conversations.latest(session.sessionId)).length).toBe(12);
  });
});
