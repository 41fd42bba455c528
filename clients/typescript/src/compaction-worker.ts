/**
 * The compaction worker loop (docs/conversations.md "The worker loop"), the TypeScript twin of Python's
 * `agentstate.conversations.CompactionWorker`: claim a due compaction of the client's namespace (or of one
 * thread) with a lease, ask the user's `summarize(compaction)` for the text, submit it. A summary refused
 * with FAILED_PRECONDITION (SUMMARY_STALE, COMPACTION_DONE, LEASE_LOST) is dropped and the loop claims
 * again; a worker killed between claim and submit loses nothing (its lease expires, the next claim takes
 * the compaction over). There is no heartbeat: a summary that takes longer than the lease needs a longer
 * `leaseMs` (up to 1 hour), as in Python.
 *
 *   const w = new CompactionWorker(client, async (comp) => myModel.summarise(comp), { worker: "summariser-1" });
 *   await w.runOnce();                               // what is due now, no waiting
 *   const stop = new AbortController();
 *   await w.run({ signal: stop.signal, waitMs: 30_000 });   // until stop.abort()
 */
import type { Client } from "./client.js";
import { Cancelled, FailedPrecondition } from "./errors.js";
import type { Compaction } from "./gen/agentstate/v1/conversations_pb.js";

export type Summarize = (compaction: Compaction) => unknown | Promise<unknown>;

export interface CompactionWorkerOptions {
  /** The worker name sent with each claim (default "agentstate.CompactionWorker"). */
  worker?: string;
  /** Claim only this thread's compactions (default: any thread of the client's namespace). */
  threadId?: string;
  /** The claim's lease (default: the policy's lease_timeout). */
  leaseMs?: number;
  /** The producer recorded with each summary (default: the worker name). */
  producer?: string;
}

/** The first `max` Unicode code points of `text` (the server counts max_summary_chars in code points). */
export function cutCodePoints(text: string, max: number): string {
  let n = 0;
  let i = 0;
  for (const ch of text) {
    if (n === max) return text.slice(0, i);
    n += 1;
    i += ch.length;
  }
  return text;
}

export class CompactionWorker {
  readonly worker: string;
  readonly threadId: string;
  readonly leaseMs?: number;
  readonly producer: string;
  /** Summaries applied / refused and dropped since the worker was made. */
  applied = 0;
  dropped = 0;

  constructor(readonly client: Client, readonly summarize: Summarize, opts: CompactionWorkerOptions = {}) {
    this.worker = opts.worker ?? "agentstate.CompactionWorker";
    this.threadId = opts.threadId ?? "";
    this.leaseMs = opts.leaseMs;
    this.producer = opts.producer ?? this.worker;
  }

  /** One claim (waiting up to waitMs) and its summary; false when nothing was due. */
  private async one(waitMs: number, signal?: AbortSignal): Promise<boolean> {
    const claim = await this.client.conversations.claimCompaction({
      worker: this.worker, threadId: this.threadId, leaseMs: this.leaseMs, waitMs, signal,
    });
    if (!claim) return false;
    const comp = claim.compaction!;
    const text = cutCodePoints(String(await this.summarize(comp)), comp.maxSummaryChars) || "(empty)";
    try {
      await this.client.conversations.submitSummary(claim, text, { producer: this.producer });
      this.applied += 1;
    } catch (e) {
      if (!(e instanceof FailedPrecondition)) throw e; // stale, done or lease lost: drop it, claim again
      this.dropped += 1;
    }
    return true;
  }

  /** Summarise what is due now (no waiting); resolves to how many summaries were applied. */
  async runOnce(): Promise<number> {
    const before = this.applied;
    while (await this.one(0)) {
      /* claim again */
    }
    return this.applied - before;
  }

  /** Work until `signal` aborts, waiting up to `waitMs` (default 30 s) per claim. */
  async run(opts: { signal?: AbortSignal; waitMs?: number } = {}): Promise<void> {
    const { signal } = opts;
    const waitMs = opts.waitMs ?? 30_000;
    while (!signal?.aborted) {
      try {
        await this.one(waitMs, signal);
      } catch (e) {
        if (signal?.aborted && (e instanceof Cancelled || (e as Error)?.name === "AbortError")) return;
        throw e;
      }
    }
  }
}
