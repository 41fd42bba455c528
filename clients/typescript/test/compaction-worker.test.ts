/**
 * CompactionWorker (src/compaction-worker.ts) against the sidecar: it applies what is due and leaves a
 * compaction claimed by someone else alone, keeps working in `run` until aborted, drops a summary refused
 * as stale (the range was cleared while it summarised) or with a lost lease (another worker took the
 * expired claim over), cuts texts to max_summary_chars in code points, and lets a summariser's error through.
 */
import { randomUUID } from "node:crypto";
import { afterAll, describe, expect, inject, it } from "vitest";
import { Client, CompactionWorker, cutCodePoints, item, itemValue } from "../src/index.js";

const address = inject("address");
const ns = `ts-cw-${randomUUID().slice(0, 8)}`;
const c = new Client(address, { namespace: ns });
afterAll(() => c.close());
const tid = () => `t-${randomUUID()}`;
const msgs = (names: string[]) => names.map((n) => item("message", n, { role: "user" }));
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function summaries(t: string) {
  return (await c.conversations.stub.listSummaries({ namespace: ns, threadId: t, level: 1 })).summaries;
}

async function thread(policy: { triggerItems: number; compactItems: number; keepLastItems: number; maxSummaryChars?: number }) {
  const t = tid();
  await c.conversations.append(t, [], { createThread: true });
  await c.conversations.setCompactionPolicy(policy, { threadId: t });
  return t;
}

describe("CompactionWorker", () => {
  it("applies what is due, leaves another worker's claim alone, and runs until aborted", async () => {
    const t = await thread({ triggerItems: 3, compactItems: 1, keepLastItems: 1 });
    await c.conversations.append(t, msgs(["m0", "m1", "m2", "m3", "m4", "m5", "m6", "m7"])); // L1:1-1 … L1:6-6
    const w = new CompactionWorker(c, (comp) => "s:" + comp.items.map(itemValue).join(","), { worker: "ts-helper", threadId: t });
    const held = await c.conversations.claimCompaction({ worker: "other", threadId: t });
    expect(await w.runOnce()).toBe(5);
    expect([w.applied, w.dropped]).toEqual([5, 0]);
    let sums = await summaries(t);
    expect(sums.map((s) => s.producer)).toEqual(Array(5).fill("ts-helper"));
    expect(sums.map((s) => s.summaryId)).not.toContain(held!.compaction!.compactionId);
    expect(sums.map((s) => s.text)).toEqual(["s:m1", "s:m2", "s:m3", "s:m4", "s:m5"]);

    const stop = new AbortController();
    const running = w.run({ signal: stop.signal, waitMs: 500 });
    await c.conversations.append(t, msgs(["x", "y"])); // L1:7-7 and L1:8-8 due
    const deadline = Date.now() + 10_000;
    while (Date.now() < deadline && w.applied < 7) await sleep(50);
    stop.abort();
    await running; // ends without an error once aborted
    expect(w.applied).toBe(7);
    sums = await summaries(t);
    expect(sums.map((s) => s.text).slice(-2)).toEqual(["s:m6", "s:m7"]);
  });

  it("drops a summary refused as stale and one whose lease was lost", async () => {
    const t = await thread({ triggerItems: 3, compactItems: 1, keepLastItems: 1 });
    await c.conversations.append(t, msgs(["a", "b", "c"])); // L1:1-1 due
    const stale = new CompactionWorker(c, async () => {
      await c.conversations.clear(t); // the range goes while the model "thinks": SUMMARY_STALE
      return "late";
    }, { threadId: t });
    expect(await stale.runOnce()).toBe(0);
    expect([stale.applied, stale.dropped]).toEqual([0, 1]);
    expect(await summaries(t)).toEqual([]);

    await c.conversations.append(t, msgs(["d", "e", "f"])); // L1:4-4 due
    let takenOver = "";
    const slow = new CompactionWorker(c, async (comp) => {
      await sleep(1300); // longer than the 1 s lease: another worker takes the claim over meanwhile
      const other = await c.conversations.claimCompaction({ worker: "other", threadId: t });
      takenOver = other!.compaction!.compactionId;
      await c.conversations.submitSummary(other!, "theirs", { producer: "other" });
      return `mine ${comp.compactionId}`;
    }, { threadId: t, leaseMs: 1000 });
    expect(await slow.runOnce()).toBe(0);
    expect([slow.applied, slow.dropped]).toEqual([0, 1]);
    const sums = await summaries(t);
    expect(sums.map((s) => [s.summaryId, s.text, s.producer])).toEqual([[takenOver, "theirs", "other"]]);
  });

  it("cuts a long text to max_summary_chars code points, sends (empty) for nothing, and rethrows other errors", async () => {
    const t = await thread({ triggerItems: 3, compactItems: 1, keepLastItems: 1, maxSummaryChars: 16 });
    await c.conversations.append(t, msgs(["a", "b", "c", "d"])); // L1:1-1, L1:2-2 due
    const texts = ["😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀", ""];
    const w = new CompactionWorker(c, () => texts.shift(), { threadId: t });
    expect(await w.runOnce()).toBe(2);
    expect((await summaries(t)).map((s) => s.text)).toEqual(["😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀", "(empty)"]);
    expect(cutCodePoints("a😀b", 2)).toBe("a😀");
    expect(cutCodePoints("ab", 5)).toBe("ab");

    await c.conversations.append(t, msgs(["e"])); // L1:3-3 due
    const failing = new CompactionWorker(c, () => { throw new Error("model down"); }, { threadId: t });
    await expect(failing.runOnce()).rejects.toThrow("model down");
  });
});
