/**
 * Follow watches on connections of their own: the sidecar's default --max-streams-per-connection 3 would
 * otherwise let three open watches on the client's channel hold up every other call.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Client } from "../src/index.js";
import { Sidecar } from "./sidecar.js";

const STREAMS = 5;
let sc: Sidecar;
beforeAll(async () => { sc = await Sidecar.temp().start(); }, 60000);
afterAll(async () => { await sc?.stop(); });

async function until(pred: () => boolean, what: string, ms = 10000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("long-lived streams", () => {
  it("five follow watches leave unary calls free, deliver events, and close with the client", async () => {
    const c = new Client(sc.address);
    const ids = Array.from({ length: STREAMS }, (_, k) => `ts-sc-${k}-${Date.now()}`);
    for (const id of ids) await c.createThread(id);
    const got: bigint[][] = ids.map(() => []);
    const watches = ids.map(async (id, k) => {
      for await (const r of c.events.watchEvents({ threadId: id, follow: true })) {
        got[k].push(r.event!.sequence);
        if (got[k].length === 1) return;
      }
    });
    await until(() => c.streamConnections === STREAMS, "the watches' connections");
    const t0 = Date.now();
    for (let i = 0; i < 5; i++) {
      await c.putCheckpoint(`${ids[0]}-u`, { i }, { timeoutMs: 5000 });
      expect(await c.getValues(`${ids[0]}-u`, "", { timeoutMs: 5000 })).toEqual({ i });
    }
    expect(Date.now() - t0).toBeLessThan(4000);
    for (const id of ids) {
      await c.events.appendEvents({ threadId: id, events: [{ type: "x" }] });
    }
    await Promise.all(watches);
    expect(got).toEqual(ids.map(() => [1n]));
    await until(() => c.streamConnections === 0, "the finished watches' connections to close");
    // one left open: the client's close closes its connection and ends it
    const held = (async () => {
      try { for await (const _ of c.events.watchEvents({ threadId: ids[0], afterSequence: 1n, follow: true })) { /* none */ } }
      catch { /* cancelled by close */ }
    })();
    await until(() => c.streamConnections === 1, "the held watch's connection");
    const nofollow: bigint[] = [];
    for await (const r of c.events.watchEvents({ threadId: ids[0], follow: false })) nofollow.push(r.event!.sequence);
    expect(nofollow).toEqual([1n]);
    expect(c.streamConnections).toBe(1); // a watch without follow stays on the client's channel
    c.close();
    expect(c.streamConnections).toBe(0);
    await held;
  }, 60000);
});
