/** The official LangGraph.js checkpointer conformance suite, run against SidecarSaver. */
import { randomUUID } from "node:crypto";
import { inject, type it as vitestIt } from "vitest";
import { validate } from "@langchain/langgraph-checkpoint-validation";
import { SidecarSaver } from "../src/langgraph.js";

const address = inject("address");

/**
 * One upstream case asserts that `put` drops the channel values `newVersions` does not name, even with no
 * parent checkpoint to take them from. LangGraph.js's reference saver, MemorySaver, stores them (upstream
 * skips the case for it: "MemorySaver doesn't store channel deltas"), and so does SidecarSaver: what `put`
 * is given is what a later read returns. LangGraph.js itself relies on that: a `__copy__` fork of a thread's
 * first checkpoint is such a put, and the fork re-runs its input only if the input is stored
 * (langgraph-fork.test.ts). The case still runs, as one that must fail: if the saver ever dropped those
 * values, it would pass, and this file would fail.
 */
const STORES_WHAT_PUT_IS_GIVEN = "should only store channel_values that have changed (based on newVersions)";
const globals = globalThis as unknown as { it: typeof vitestIt };
const upstreamIt = globals.it;
globals.it = new Proxy(upstreamIt, {
  apply(target, self, args: Parameters<typeof vitestIt>) {
    const [name, ...rest] = args;
    if (name !== STORES_WHAT_PUT_IS_GIVEN) return Reflect.apply(target, self, args);
    return target.fails(`[must fail: SidecarSaver, like MemorySaver, stores what put is given] ${name}`, ...(rest as [() => unknown]));
  },
});

validate({
  checkpointerName: "SidecarSaver",
  // Each instance gets a namespace of its own: what one writes, no other reads.
  createCheckpointer: () => new SidecarSaver({ address, namespace: `lgv-${randomUUID()}` }),
  destroyCheckpointer: (saver: SidecarSaver) => saver.close(),
});
