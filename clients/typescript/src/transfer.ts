/**
 * TransferService (transfer.proto, docs/export-format.md): `c.transfer` on a Client moves a namespace's state
 * between serving sidecars as the export file of `sidecar export`. Both calls need an admin credential when the
 * sidecar runs with auth.
 *
 *   const { summary } = await c.transfer.exportNamespace("team-a", { to: "team-a.asx" });  // a new file
 *   const { data } = await c.transfer.exportNamespace();                                  // the bytes
 *   const r = await c.transfer.importNamespace("team-a.asx", { replace: true });         // a path or bytes
 *
 * `to` is written as a temporary file next to it and put in place only when the stream ended with its summary
 * and as many bytes as the summary says (an export never overwrites; a cut stream leaves nothing under the
 * name). The import's namespace defaults to the one the file's header names, as `sidecar import` does. The
 * default deadline is an hour (the client's timeoutMs is for ordinary calls). Neither call is retried: a
 * failed export is made again from the start, a failed import wrote nothing.
 */
import { link, open, stat, unlink } from "node:fs/promises";
import { basename, dirname, join, resolve } from "node:path";
import { randomBytes } from "node:crypto";
import * as grpc from "@grpc/grpc-js";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import type { GenService } from "@bufbuild/protobuf/codegenv2";
import { decode } from "./codec.js";
import { fromServiceError, makeError, Status } from "./errors.js";
import type { CallOptions, Stub } from "./rpc.js";
import {
  ImportNamespaceRequestSchema,
  ImportNamespaceResponseSchema,
  TransferService,
  type ExportSummary,
  type ImportNamespaceRequest,
  type ImportNamespaceResponse,
} from "./gen/agentstate/v1/transfer_pb.js";

export type TransferStub = Stub<typeof TransferService extends GenService<infer S> ? S : never>;

/** The default deadline of an export or an import (ms). */
export const TRANSFER_TIMEOUT_MS = 3_600_000;
/** The most file bytes in one ImportNamespace data message. */
export const UPLOAD_CHUNK = 1 << 20;

export type TransferProgress = (phase: string, done: number, total: number) => void;

export interface ExportOptions extends CallOptions {
  /** Only this thread (no memory or namespace settings). */
  threadId?: string;
  /** Refuse (EXPORT_PLAINTEXT_REFUSED) instead of exporting an encrypted namespace in plaintext. */
  refuseEncrypted?: boolean;
  /** The most file bytes in one message (0: the server's 1 MiB; at most 4 MiB). */
  chunkBytes?: number;
  /** Write the file here (a new file) instead of returning its bytes. */
  to?: string;
  /** Called with each progress message ("threads", "memory"). */
  progress?: TransferProgress;
}

export interface ImportOptions extends CallOptions {
  /** The namespace to import into (default: the one the file's header names). */
  namespace?: string;
  replace?: boolean;
  /** Verify the file and check conflicts, write nothing. */
  checkOnly?: boolean;
  /** Import a file of an encrypted namespace into one without a key here. */
  allowPlaintext?: boolean;
  /** Called after each chunk sent: ("sending", bytes sent, file size). */
  progress?: TransferProgress;
}

/** The namespace an export file's header names (the import verifies the rest). */
export function fileNamespace(head: Uint8Array): string {
  const bad = (why: string) => new TypeError(`not an export file (${why})`);
  if (head.length < 4) throw bad("too short");
  const n = new DataView(head.buffer, head.byteOffset, head.byteLength).getUint32(0);
  if (n > 1 << 20 || head.length < 4 + n) throw bad("no header");
  let header: unknown;
  try {
    header = decode(head.subarray(4, 4 + n));
  } catch {
    throw bad("its header does not decode");
  }
  const h = header as { t?: unknown; scope?: { namespace?: unknown } } | null;
  const ns = h?.scope?.namespace;
  if (h?.t !== "header" || typeof ns !== "string") throw bad("no header naming a namespace");
  return ns;
}

async function headOf(path: string): Promise<Uint8Array> {
  const f = await open(path, "r");
  try {
    const len = Buffer.alloc(4);
    const { bytesRead } = await f.read(len, 0, 4, 0);
    if (bytesRead < 4) return len.subarray(0, bytesRead);
    const n = Math.min(len.readUInt32BE(0), (1 << 20) + 1);
    const buf = Buffer.alloc(4 + n);
    const got = await f.read(buf, 0, 4 + n, 0);
    return buf.subarray(0, got.bytesRead);
  } finally {
    await f.close();
  }
}

/** TransferService calls on a client's channel. */
export class Transfer {
  constructor(readonly stub: TransferStub, readonly grpcClient: grpc.Client, readonly namespace: string) {}

  /**
   * Export `namespace` (default: the client's), or its thread `threadId`: the summary, and the file's bytes
   * (`data`) unless `to` names the file to write.
   */
  async exportNamespace(namespace?: string, opts: ExportOptions = {}): Promise<{ summary: ExportSummary; data?: Uint8Array }> {
    const request = {
      namespace: namespace ?? this.namespace,
      threadId: opts.threadId ?? "",
      refuseEncrypted: opts.refuseEncrypted ?? false,
      chunkBytes: opts.chunkBytes ?? 0,
    };
    const callOpts = { ...opts, timeoutMs: opts.timeoutMs ?? TRANSFER_TIMEOUT_MS };
    const target = opts.to === undefined ? undefined : resolve(opts.to);
    if (target !== undefined && (await exists(target))) throw new Error(`${target} exists; an export never overwrites`);
    const tmp = target && join(dirname(target), `.export-${basename(target)}-${randomBytes(6).toString("hex")}`);
    const file = tmp ? await open(tmp, "wx") : undefined;
    const chunks: Uint8Array[] = [];
    let size = 0;
    let summary: ExportSummary | undefined;
    try {
      for await (const msg of this.stub.exportNamespace(request, callOpts)) {
        const part = msg.part;
        if (part.case === "data") {
          size += part.value.length;
          if (file) await file.write(part.value);
          else chunks.push(part.value);
        } else if (part.case === "progress") {
          opts.progress?.(part.value.phase, Number(part.value.done), Number(part.value.total));
        } else if (part.case === "summary") {
          summary = part.value;
        }
      }
      if (!summary) throw makeError(Status.UNAVAILABLE, "the export stream ended without its summary: no file was made");
      if (BigInt(size) !== summary.bytes) {
        throw makeError(Status.UNAVAILABLE, `the export stream held ${size} bytes, its summary says ${summary.bytes}: no file was made`);
      }
      if (file && tmp && target) {
        await file.sync();
        await file.close();
        await link(tmp, target).catch((e: NodeJS.ErrnoException) => {
          throw e.code === "EEXIST" ? new Error(`${target} exists; an export never overwrites`) : e;
        });
        return { summary };
      }
      return { summary, data: Buffer.concat(chunks) };
    } finally {
      if (file) {
        await file.close().catch(() => undefined);
        await unlink(tmp!).catch(() => undefined);
      }
    }
  }

  /**
   * Import an export file (a path, or its bytes) into `opts.namespace` (default: the namespace the file
   * names). Nothing is written unless the whole file arrives intact and conflicts nothing (or `replace`).
   */
  async importNamespace(data: Uint8Array | string, opts: ImportOptions = {}): Promise<ImportNamespaceResponse> {
    const size = typeof data === "string" ? (await stat(data)).size : data.length;
    const namespace = opts.namespace ?? fileNamespace(typeof data === "string" ? await headOf(data) : data);
    const header = { namespace, replace: opts.replace ?? false, checkOnly: opts.checkOnly ?? false,
      allowPlaintext: opts.allowPlaintext ?? false, size: BigInt(size) };
    const deadline = new Date(Date.now() + (opts.timeoutMs ?? TRANSFER_TIMEOUT_MS));
    const md = new grpc.Metadata();
    for (const [k, v] of Object.entries(opts.headers ?? {})) md.set(k, v);
    const path = `/${TransferService.typeName}/ImportNamespace`;
    let failed: unknown;
    const result = new Promise<ImportNamespaceResponse>((resolveCall, reject) => {
      const call = this.grpcClient.makeClientStreamRequest(
        path,
        (m: ImportNamespaceRequest) => Buffer.from(toBinary(ImportNamespaceRequestSchema, m)),
        (b: Buffer) => fromBinary(ImportNamespaceResponseSchema, b),
        md,
        { deadline },
        (err, resp) => (err ? reject(fromServiceError(err)) : resolveCall(resp!)),
      );
      opts.signal?.addEventListener("abort", () => call.cancel(), { once: true });
      // once the call has ended (the server answered early, an error, a cancel) nothing more is sent, and a
      // send waiting for the stream to drain stops waiting, so a file being read is closed
      let over = false;
      const wake: (() => void)[] = [];
      const end = () => {
        over = true;
        for (const w of wake.splice(0)) w();
      };
      call.on("status", end);
      call.on("error", end);
      const send = async (m: ImportNamespaceRequest) => {
        if (over) throw new Error("the import call ended");
        if (!call.write(m)) {
          await new Promise<void>((r) => {
            wake.push(r);
            call.once("drain", () => r());
          });
        }
      };
      (async () => {
        await send(create(ImportNamespaceRequestSchema, { part: { case: "header", value: header } }));
        let sent = 0;
        const sendChunk = async (chunk: Uint8Array) => {
          await send(create(ImportNamespaceRequestSchema, { part: { case: "data", value: chunk } }));
          sent += chunk.length;
          opts.progress?.("sending", sent, size);
        };
        if (typeof data !== "string") {
          while (sent < data.length) await sendChunk(data.subarray(sent, sent + UPLOAD_CHUNK));
        } else {
          const f = await open(data, "r");
          try {
            for (;;) {
              const buf = Buffer.alloc(UPLOAD_CHUNK);
              const { bytesRead } = await f.read(buf, 0, UPLOAD_CHUNK, null);
              if (bytesRead === 0) break;
              await sendChunk(buf.subarray(0, bytesRead));
            }
          } finally {
            await f.close();
          }
        }
        call.end();
      })().catch((e: unknown) => {
        if (over) return; // the call's own status is the answer
        failed = e; // e.g. the file could not be read: cancelled, so the server writes nothing
        call.cancel();
      });
    });
    try {
      return await result;
    } catch (e) {
      throw failed ?? e;
    }
  }
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(() => true, () => false);
}
