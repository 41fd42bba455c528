/**
 * A claimed run (`Client.startRun` / `Client.claimRun`): its lease, heartbeats and the
 * calls that carry its run id and lease id.
 *
 *   const held = await c.startRun("orders", { createThread: true });
 *   const ka = held.keepAlive(5000);                 // heartbeats in the background
 *   const b = await held.beginEffect("charge:17");   // PENDING: do it; DONE: skip; UNKNOWN: reconcile first
 *   await held.putCheckpoint({ step: 1 }, { effects: [{ idempotencyKey: "charge:17", token: b.token, outcome }] });
 *   await held.complete();
 *
 * A sidecar restart does not lose a held run: the restarted sidecar gives running leases
 * one more lease timeout, so `keepAlive` treats UNAVAILABLE and DEADLINE_EXCEEDED (any
 * failure the server did not decide) as transient and keeps trying until the lease itself
 * would have expired. It reports the run lost (`held.lost`, `ka.lost`) only when it is:
 * the server says so (RUN_NOT_ACTIVE, LEASE_LOST for a newer holder, RUN_NOT_FOUND), or no
 * renewal got through for a whole lease timeout (LeaseExpired; counted on this process's
 * clock from when the last heartbeat's or the claim's answer came: the sidecar renewed the
 * lease just before it sent that answer, whereas a heartbeat that waited through a restart
 * was sent long before). Stop working on a run that is lost: the sidecar will give it to
 * another holder.
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import { AgentStateError, fromServiceError, LeaseExpired } from "./errors.js";
import type { CallOptions } from "./rpc.js";
import type { Client, PutCheckpointOptions } from "./client.js";
import { encodeField } from "./values.js";
import type { Lease, Run } from "./gen/agentstate/v1/runs_pb.js";
import type { BeginEffectResponse, Effect } from "./gen/agentstate/v1/effects_pb.js";
import type { PutCheckpointResponse } from "./gen/agentstate/v1/threads_pb.js";
import type { StepRecordSchema } from "./gen/agentstate/v1/runs_pb.js";

/** ErrorInfo reasons after which a heartbeat will never succeed: the run is lost. */
export const RUN_GONE = new Set(["RUN_NOT_ACTIVE", "LEASE_LOST", "RUN_NOT_FOUND"]);

/** Pause between heartbeat attempts after a failure the call itself does not retry (ms). */
const RETRY_PAUSE_MS = 100;

/** A running `keepAlive`: `stop()` ends it; `done` settles when it ends (stopped or lost). */
export interface KeepAlive {
  stop(): void;
  readonly done: Promise<void>;
  /** Why the run is lost, once it is. */
  readonly lost: AgentStateError | undefined;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

export class HeldRun {
  /** The run as last seen (claim, heartbeat, completion). */
  run: Run;
  readonly lease: Lease;
  /** Why the run is lost to this holder (set by keepAlive), else undefined. */
  lost?: AgentStateError;
  private leaseUntil: number;
  private keeping?: AbortController;

  constructor(readonly client: Client, run: Run, lease: Lease) {
    this.run = run;
    this.lease = lease;
    this.leaseUntil = performance.now() + this.leaseMs;
  }

  get runId(): string {
    return this.lease.runId;
  }
  get leaseId(): string {
    return this.lease.leaseId;
  }
  get threadId(): string {
    return this.lease.threadId;
  }
  /** Where to continue: the run's last checkpoint, else where it started ("" = empty thread). */
  get resumeCheckpointId(): string {
    return this.lease.resumeCheckpointId;
  }

  /** The run's lease timeout (ms): what each renewal is good for. */
  get leaseMs(): number {
    const d = this.run.leaseTimeout;
    return d ? Number(d.seconds) * 1000 + d.nanos / 1e6 : 0;
  }

  /** Milliseconds until the lease expires unless renewed, as this process sees it. */
  leaseRemainingMs(): number {
    return this.leaseUntil - performance.now();
  }

  /** Renew the lease (safe to repeat: retried through a sidecar restart until the call's deadline). */
  async heartbeat(opts: CallOptions = {}): Promise<Run> {
    const resp = await this.client.runs.heartbeat(
      { namespace: this.client.namespace, runId: this.runId, leaseId: this.leaseId },
      opts,
    );
    this.run = resp.run!;
    this.leaseUntil = Math.max(this.leaseUntil, performance.now() + this.leaseMs); // renewed just before the answer
    return this.run;
  }

  /** The error that makes the run lost after a failed heartbeat, or undefined: try again. */
  private afterFailedHeartbeat(e: unknown): AgentStateError | undefined {
    const err = e instanceof AgentStateError ? e : fromServiceError(e as Error);
    if (RUN_GONE.has(err.reason)) return err;
    if (this.leaseRemainingMs() > 0) return undefined;
    const expired = new LeaseExpired(
      `no heartbeat of run '${this.runId}' got through for its lease timeout of ${this.leaseMs / 1000} s: ` +
        `its lease has expired, stop working on it (last failure: ${err.message})`,
    );
    (expired as { cause?: unknown }).cause = err;
    return expired;
  }

  /**
   * Heartbeat every `intervalMs` until stopped or the run is lost (see the module doc: a sidecar
   * restart within the lease is ridden out). Completing or failing the run stops it.
   */
  keepAlive(intervalMs: number): KeepAlive {
    this.keeping?.abort();
    const ctl = new AbortController();
    this.keeping = ctl;
    this.lost = undefined;
    const beat = async (): Promise<AgentStateError | undefined> => {
      while (!ctl.signal.aborted) {
        try {
          await this.heartbeat({ timeoutMs: Math.max(this.leaseRemainingMs(), 1), signal: ctl.signal });
          return undefined;
        } catch (e) {
          if (ctl.signal.aborted) return undefined;
          const lost = this.afterFailedHeartbeat(e);
          if (lost) return lost;
        }
        await sleep(Math.min(RETRY_PAUSE_MS, Math.max(this.leaseRemainingMs(), 0)), ctl.signal);
      }
      return undefined;
    };
    const done = (async () => {
      for (;;) {
        await sleep(intervalMs, ctl.signal);
        if (ctl.signal.aborted) return;
        const lost = await beat();
        if (lost) {
          this.lost = lost;
          return;
        }
      }
    })();
    const held = this;
    return {
      stop: () => ctl.abort(),
      done,
      get lost() {
        return held.lost;
      },
    };
  }

  private stopKeepAlive(): void {
    this.keeping?.abort();
  }

  /** BeginEffect as this run (safe to repeat: the same holder gets the same token and state). */
  beginEffect(
    idempotencyKey: string,
    opts: CallOptions & { description?: string; requestDigest?: string; stepId?: string } = {},
  ): Promise<BeginEffectResponse> {
    return this.client.effects.beginEffect(
      {
        namespace: this.client.namespace,
        idempotencyKey,
        runId: this.runId,
        leaseId: this.leaseId,
        description: opts.description ?? "",
        requestDigest: opts.requestDigest ?? "",
        stepId: opts.stepId ?? "",
      },
      opts,
    );
  }

  /** CompleteEffect with the token BeginEffect gave (safe to repeat). */
  async completeEffect(idempotencyKey: string, token: string, outcome?: unknown, opts: CallOptions = {}): Promise<Effect> {
    const resp = await this.client.effects.completeEffect(
      {
        namespace: this.client.namespace,
        idempotencyKey,
        token,
        outcome: outcome === undefined ? undefined : encodeField(outcome, "outcome"),
      },
      opts,
    );
    return resp.effect!;
  }

  /** PutCheckpoint as this run, with steps, events and effect completions in the same transaction. */
  putCheckpoint(channels: Record<string, unknown>, opts: PutCheckpointOptions = {}): Promise<PutCheckpointResponse> {
    return this.client.putCheckpoint(this.threadId, channels, {
      ...opts,
      checkpointNs: opts.checkpointNs ?? this.lease.checkpointNs,
      runId: this.runId,
      leaseId: this.leaseId,
    });
  }

  /** RecordStep: a finished step of this run. */
  async recordStep(step: MessageInitShape<typeof StepRecordSchema>, opts: CallOptions & { requestId?: string } = {}) {
    const resp = await this.client.runs.recordStep(
      { namespace: this.client.namespace, runId: this.runId, leaseId: this.leaseId, step, requestId: opts.requestId ?? "" },
      opts,
    );
    return resp.step!;
  }

  /** CompleteRun (SUCCESS, or INTERRUPTED with `interrupted`); stops keepAlive. */
  async complete(output?: unknown, opts: CallOptions & { interrupted?: boolean; requestId?: string } = {}): Promise<Run> {
    this.stopKeepAlive();
    const resp = await this.client.runs.completeRun(
      {
        namespace: this.client.namespace,
        runId: this.runId,
        leaseId: this.leaseId,
        output: output === undefined ? undefined : encodeField(output, "output"),
        interrupted: opts.interrupted ?? false,
        requestId: opts.requestId ?? "",
      },
      opts,
    );
    this.run = resp.run!;
    return this.run;
  }

  /** FailRun (ERROR); stops keepAlive. */
  async fail(error = "", opts: CallOptions & { requestId?: string } = {}): Promise<Run> {
    this.stopKeepAlive();
    const resp = await this.client.runs.failRun(
      { namespace: this.client.namespace, runId: this.runId, leaseId: this.leaseId, error, requestId: opts.requestId ?? "" },
      opts,
    );
    this.run = resp.run!;
    return this.run;
  }
}
