/**
 * The generic server-streaming helpers (serverStream, resumable) against a streaming RPC
 * the sidecar serves today: grpc.health.v1.Health/Watch. WatchEvents (runs/events) will
 * use the same helpers through `client.stub(EventService)` once its proto lands.
 */
import { BinaryReader, BinaryWriter } from "@bufbuild/protobuf/wire";
import { describe, expect, it } from "vitest";
import { AgentStateError, connect, resumable, serverStream, Status, Unavailable } from "../src/index.js";
import { Sidecar } from "./sidecar.js";

// grpc.health.v1 messages, encoded by hand (service = 1; status = 1).
const WATCH = "/grpc.health.v1.Health/Watch";
const SERVING = 1;
const NOT_SERVING = 2;
const SERVICE_UNKNOWN = 3;
const encodeReq = (service: string) => new BinaryWriter().tag(1, 2).string(service).finish();
function decodeResp(b: Uint8Array): number {
  const r = new BinaryReader(b);
  let status = 0;
  while (r.pos < r.len) {
    const [field, wt] = r.tag();
    if (field === 1) status = r.int32();
    else r.skip(wt);
  }
  return status;
}

describe("server streams (grpc.health.v1 Watch)", () => {
  it("yields updates as they happen and ends with a typed error when the server goes away", async () => {
    const sc = await Sidecar.temp().start();
    const client = connect(sc.address);
    try {
      const seen: number[] = [];
      let error: unknown;
      const stream = serverStream(client, WATCH, encodeReq, decodeResp, "agentstate.v1.ThreadService");
      try {
        for await (const status of stream) {
          seen.push(status);
          if (seen.length === 1) void sc.stop(); // SIGTERM: the server drains and reports NOT_SERVING
        }
      } catch (e) {
        error = e;
      }
      expect(seen[0]).toBe(SERVING);
      expect(seen).toContain(NOT_SERVING);
      if (error !== undefined) {
        expect(error).toBeInstanceOf(AgentStateError);
        expect([Status.UNAVAILABLE, Status.CANCELLED]).toContain((error as AgentStateError).code);
      }
    } finally {
      client.close();
      await sc.stop();
      sc.cleanup();
    }
  });

  it("leaving the loop early cancels the call", async () => {
    const sc = await Sidecar.temp().start();
    const client = connect(sc.address);
    try {
      for (let i = 0; i < 3; i++) {
        for await (const status of serverStream(client, WATCH, encodeReq, decodeResp, "nope")) {
          expect(status).toBe(SERVICE_UNKNOWN);
          break;
        }
      }
    } finally {
      client.close();
      await sc.stop();
      sc.cleanup();
    }
  });

  it("resumable() reopens the stream after a transient failure, passing the last item seen", async () => {
    const sc = await Sidecar.temp().start();
    const client = connect(sc.address);
    const opened: (number | undefined)[] = [];
    const seen: number[] = [];
    try {
      const watch = resumable<number>(
        (last) => {
          opened.push(last);
          return serverStream(client, WATCH, encodeReq, decodeResp, "agentstate.v1.ThreadService");
        },
        { policy: { maxAttempts: 200, initialBackoffMs: 50, maxBackoffMs: 200 } },
      );
      for await (const status of watch) {
        seen.push(status);
        if (seen.length === 1) {
          await sc.stop(); // stream breaks: UNAVAILABLE
          sc.spawn(); // same socket, same data: the watch comes back
        }
        if (opened.length >= 2 && status === SERVING) break;
      }
      expect(opened[0]).toBeUndefined();
      expect(opened.length).toBeGreaterThanOrEqual(2);
      expect(opened.slice(1)).not.toContain(undefined);
      expect(seen.at(-1)).toBe(SERVING);
    } finally {
      client.close();
      await sc.stop();
      sc.cleanup();
    }
  });

  it("resumable() gives up on a non-transient error", async () => {
    let opens = 0;
    const failing = resumable<number>(async function* () {
      opens++;
      throw new AgentStateError(Status.INVALID_ARGUMENT, "bad");
    });
    await expect(failing.next()).rejects.toThrow(/INVALID_ARGUMENT/);
    expect(opens).toBe(1);
    let transient = 0;
    const flaky = resumable<number>(
      async function* () {
        if (++transient < 3) throw new Unavailable(Status.UNAVAILABLE, "down");
        yield 7;
      },
      { policy: { maxAttempts: 5, initialBackoffMs: 1, maxBackoffMs: 2 } },
    );
    const items: number[] = [];
    for await (const x of flaky) items.push(x);
    expect(items).toEqual([7]);
    expect(transient).toBe(3);
  });
});
