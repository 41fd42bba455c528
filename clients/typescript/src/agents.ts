/**
 * `SidecarSession`: a `Session` of the OpenAI Agents SDK for JavaScript (`@openai/agents-core` 0.20) whose
 * items live in a sidecar thread's conversation log.
 *
 *   import { SidecarSession } from "@agentstate/client/agents";
 *   const session = new SidecarSession("user-42", { address: "unix:sidecar-data/sidecar.sock", namespace: "support" });
 *   await run(agent, "hello", { session });
 *
 * It behaves as the SDK's `MemorySession`: `getItems()` every item, `getItems(n <= 0)` `[]`, else the newest
 * `n`, oldest first, new objects each call; `popItem()` undefined when empty; `clearSession()` empties.
 * Items are stored as their `JSON.stringify` text and returned parsed (so properties whose value is
 * `undefined` are dropped, as in every persistent session; MemorySession's structuredClone keeps them).
 * The kind, call id and tool name the server needs for compaction and context assembly are read from the
 * item (docs/conversations.md, the JavaScript table).
 */
import { blake3 } from "@noble/hashes/blake3";
import type { AgentInputItem, Session } from "@openai/agents-core";
import { Client, type ClientOptions } from "./client.js";
import { encode } from "./codec.js";
import { newId } from "./ids.js";
import { NotFound } from "./errors.js";
import { fromValue } from "./values.js";
import { ContextSource, ItemKind, type Compaction, type ContextItem, type ConversationItem } from "./gen/agentstate/v1/conversations_pb.js";
import { FailedPrecondition } from "./errors.js";
import { cutCodePoints } from "./compaction-worker.js";

const CALL_TO_OUTPUT: Record<string, string> = {
  function_call: "function_call_result",
  computer_call: "computer_call_result",
  shell_call: "shell_call_output",
  apply_patch_call: "apply_patch_call_output",
  tool_search_call: "tool_search_output",
  program: "program_output",
};
const OUTPUTS = new Set(Object.values(CALL_TO_OUTPUT));
const MAX_ITEMS_PER_CALL = 1000;

function sortedJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(sortedJson).join(",")}]`;
  if (v && typeof v === "object") {
    const o = v as Record<string, unknown>;
    return `{${Object.keys(o).filter((k) => o[k] !== undefined).sort().map((k) => `${JSON.stringify(k)}:${sortedJson(o[k])}`).join(",")}}`;
  }
  return JSON.stringify(v) ?? "null";
}

const str = (v: unknown): string => (typeof v === "string" ? v : "");
const fits = (id: string): boolean => !id.includes("\0") && new TextEncoder().encode(id).length <= 128;

/** The kind, role, call id, tool name and dedupe key of an SDK item. */
export function describeItem(item: unknown) {
  const out: { kind: ItemKind; role: string; callId: string; toolName: string; dedupeKey: Uint8Array<ArrayBuffer> } =
    { kind: ItemKind.OTHER, role: "", callId: "", toolName: "", dedupeKey: new Uint8Array() };
  const hash = (text: string): Uint8Array<ArrayBuffer> => new Uint8Array(blake3(new TextEncoder().encode(text)));
  if (!item || typeof item !== "object" || Array.isArray(item)) return out;
  const it = item as Record<string, unknown>;
  const type = it.type;
  if (type === "message" || (type === undefined && "role" in it)) {
    out.kind = ItemKind.MESSAGE;
    out.role = str(it.role).slice(0, 256);
  } else if (typeof type === "string" && type in CALL_TO_OUTPUT) {
    out.kind = ItemKind.TOOL_CALL;
    out.callId = str(it.callId);
    out.toolName = (str(it.name) || type).slice(0, 256);
  } else if (typeof type === "string" && OUTPUTS.has(type)) {
    out.callId = str(it.callId);
    out.kind = out.callId ? ItemKind.TOOL_RESULT : ItemKind.OTHER;
    const { id: _id, callId: _c, ...rest } = it;
    out.dedupeKey = hash(sortedJson(rest));
  } else if (type === "hosted_tool_call") {
    out.kind = ItemKind.TOOL_CALL;
    out.toolName = str(it.name).slice(0, 256);
  } else if (type === "reasoning") {
    out.kind = ItemKind.REASONING;
    out.dedupeKey = hash(sortedJson([it.content ?? null, it.rawContent ?? null]));
  } else if (type === "compaction") {
    out.kind = ItemKind.SUMMARY;
  }
  if (out.callId && !fits(out.callId)) {
    out.callId = "";
    if (out.kind === ItemKind.TOOL_RESULT) out.kind = ItemKind.OTHER;
  }
  return out;
}

function parse(it: ConversationItem): { ok: boolean; item?: AgentInputItem } {
  if (it.content?.kind.case !== "msgpack") return { ok: false };
  const text = fromValue(it.content);
  if (typeof text !== "string") return { ok: false };
  try {
    return { ok: true, item: JSON.parse(text) as AgentInputItem };
  } catch {
    return { ok: false };
  }
}

export interface SidecarSessionOptions extends ClientOptions {
  /** The sidecar's address (default unix:sidecar-data/sidecar.sock); or pass `client`. */
  address?: string;
  /** A client to use (its namespace is the session's). */
  client?: Client;
  /**
   * With a summarizer the session has `runCompaction`, which the runner calls after the turns it persisted:
   * it claims this thread's due compactions and submits the summarizer's texts (originals are kept).
   */
  summarizer?: (compaction: Compaction) => string | Promise<string>;
  /** The worker and producer name of those summaries. */
  worker?: string;
  /**
   * The context mode (off by default; not MemorySession's behaviour): `getItems` returns the rendered
   * `GetContext(contextBudget)` (summaries as system messages — agents-core has no developer role —, compressed tool calls as assistant messages,
   * deduplicated results as outputs naming the kept copy, the rest as stored); `limit` is not applied then,
   * except a limit <= 0.
   */
  contextBudget?: number;
}

function render(ci: ContextItem): AgentInputItem {
  const value = ci.content ? fromValue(ci.content) : undefined;
  if (ci.source === ContextSource.SUMMARY) {
    return { role: "system", content: `Summary of earlier conversation (${ci.summaryId}): ${String(value)}` } as AgentInputItem;
  }
  if (ci.source === ContextSource.COMPRESSED_TOOL_CALL) {
    return { role: "assistant", status: "completed", content: [{ type: "output_text", text: `Tool call (compressed): ${sortedJson(value)}` }] } as AgentInputItem;
  }
  if (ci.kind === ItemKind.TOOL_RESULT && ci.duplicateOfSeq) {
    const of = (value as { duplicate_of?: string } | undefined)?.duplicate_of ?? "";
    return { type: "function_call_result", callId: ci.callId, name: ci.toolName, status: "completed",
      output: { type: "text", text: `(the same result as call ${of})` } } as AgentInputItem;
  }
  if (typeof value === "string") {
    try {
      return JSON.parse(value) as AgentInputItem;
    } catch {
      if (ci.role === "assistant") {
        return { role: "assistant", status: "completed", content: [{ type: "output_text", text: value }] } as AgentInputItem;
      }
      return { role: ci.role === "system" ? "system" : "user", content: value } as AgentInputItem;
    }
  }
  return { role: "user", content: sortedJson(value) } as AgentInputItem;
}

export class SidecarSession implements Session {
  readonly client: Client;
  private readonly ownClient: boolean;
  private readonly contextBudget?: number;
  /** Present only with a summarizer (the runner checks for it). */
  runCompaction?: () => Promise<null>;

  constructor(readonly sessionId: string, opts: SidecarSessionOptions = {}) {
    this.ownClient = !opts.client;
    this.client = opts.client ?? new Client(opts.address, opts);
    this.contextBudget = opts.contextBudget;
    const summarizer = opts.summarizer;
    if (summarizer) {
      const worker = opts.worker ?? "@agentstate/client/agents.SidecarSession";
      this.runCompaction = async () => {
        for (;;) {
          let claim;
          try {
            claim = await this.client.conversations.claimCompaction({ worker, threadId: this.sessionId });
          } catch (e) {
            if (e instanceof NotFound) return null;
            throw e;
          }
          if (!claim) return null;
          const text = cutCodePoints(await summarizer(claim.compaction!), claim.compaction!.maxSummaryChars) || "(empty)";
          try {
            await this.client.conversations.submitSummary(claim, text, { producer: worker });
          } catch (e) {
            if (!(e instanceof FailedPrecondition)) throw e; // stale or done: dropped
          }
        }
      };
    }
  }

  async getSessionId(): Promise<string> {
    return this.sessionId;
  }

  async getItems(limit?: number): Promise<AgentInputItem[]> {
    if (limit !== undefined && limit <= 0) return [];
    if (this.contextBudget !== undefined) {
      try {
        const ctx = await this.client.conversations.getContext(this.sessionId, this.contextBudget);
        return ctx.items.map(render);
      } catch (e) {
        if (e instanceof NotFound) return [];
        throw e;
      }
    }
    let window = limit ?? 0;
    for (;;) {
      let stored: ConversationItem[];
      try {
        stored = await this.client.conversations.latest(this.sessionId, window);
      } catch (e) {
        if (e instanceof NotFound) return [];
        throw e;
      }
      const items = stored.map(parse).filter((p) => p.ok).map((p) => p.item!);
      if (!window || items.length >= window || stored.length < window) return window ? items.slice(-window) : items;
      window *= 2; // foreign items among the newest: read further back
    }
  }

  async addItems(items: AgentInputItem[]): Promise<void> {
    if (items.length === 0) return;
    const inputs = items.map((item) => {
      const text = JSON.stringify(item);
      const d = describeItem(item);
      return { ...d, clientItemId: newId(), content: { kind: { case: "msgpack" as const, value: encode(text) } } };
    });
    for (let at = 0; at < inputs.length; at += MAX_ITEMS_PER_CALL) {
      await this.client.conversations.append(this.sessionId, inputs.slice(at, at + MAX_ITEMS_PER_CALL), { createThread: true });
    }
  }

  async popItem(): Promise<AgentInputItem | undefined> {
    for (;;) {
      let it: ConversationItem | undefined;
      try {
        it = await this.client.conversations.pop(this.sessionId);
      } catch (e) {
        if (e instanceof NotFound) return undefined;
        throw e;
      }
      if (!it) return undefined;
      const p = parse(it);
      if (p.ok) return p.item;
    }
  }

  async clearSession(): Promise<void> {
    try {
      await this.client.conversations.clear(this.sessionId);
    } catch (e) {
      if (!(e instanceof NotFound)) throw e;
    }
  }

  /** Close the client this session made (not one it was given). */
  close(): void {
    if (this.ownClient) this.client.close();
  }
}
