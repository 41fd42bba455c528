/** A real LangGraph.js graph with an interrupt and a resume, checkpointed in the sidecar. */
import { randomUUID } from "node:crypto";
import { describe, expect, inject, it } from "vitest";
import { AIMessage, HumanMessage, type BaseMessage } from "@langchain/core/messages";
import { Command, END, INTERRUPT, MessagesAnnotation, START, StateGraph, interrupt } from "@langchain/langgraph";
import { Client } from "../src/client.js";
import { SidecarSaver } from "../src/langgraph.js";

const address = inject("address");

function buildGraph(checkpointer: SidecarSaver) {
  return new StateGraph(MessagesAnnotation)
    .addNode("agent", (state) => {
      const last = state.messages.at(-1)!;
      return { messages: [new AIMessage(`echo: ${String(last.content)}`)] };
    })
    .addNode("review", () => {
      const answer = interrupt({ question: "approve?" });
      return { messages: [new HumanMessage(`review: ${String(answer)}`)] };
    })
    .addEdge(START, "agent")
    .addEdge("agent", "review")
    .addEdge("review", END)
    .compile({ checkpointer });
}

const texts = (msgs: BaseMessage[]) => msgs.map((m) => String(m.content));

describe("LangGraph.js graph on SidecarSaver", () => {
  it("interrupts, resumes (also from a fresh saver), and stores message lists element-wise", async () => {
    const namespace = `lg-${randomUUID()}`;
    const config = { configurable: { thread_id: "conversation-1" } };
    const saver = new SidecarSaver({ address, namespace });
    const graph = buildGraph(saver);

    const first = await graph.invoke({ messages: [new HumanMessage("hi")] }, config);
    expect((first as Record<string, any>)[INTERRUPT]?.[0]?.value).toEqual({ question: "approve?" });
    const paused = await graph.getState(config);
    expect(paused.next).toEqual(["review"]);
    expect(texts(paused.values.messages)).toEqual(["hi", "echo: hi"]);

    const resumed = await graph.invoke(new Command({ resume: "yes" }), config);
    expect(texts(resumed.messages)).toEqual(["hi", "echo: hi", "review: yes"]);
    expect(saver.stats.appended).toBeGreaterThan(0); // message lists went as append deltas
    saver.close();

    // Another process (a fresh saver, empty cache) continues the same thread.
    const saver2 = new SidecarSaver({ address, namespace });
    const graph2 = buildGraph(saver2);
    const again = await graph2.invoke({ messages: [new HumanMessage("again")] }, config);
    expect((again as Record<string, any>)[INTERRUPT]?.[0]?.value).toEqual({ question: "approve?" });
    const done = await graph2.invoke(new Command({ resume: "no" }), config);
    expect(texts(done.messages)).toEqual(["hi", "echo: hi", "review: yes", "again", "echo: again", "review: no"]);

    // History: newest first, parents chained, steps decreasing.
    const history = [];
    for await (const snap of graph2.getStateHistory(config)) history.push(snap);
    expect(history.length).toBeGreaterThanOrEqual(8);
    expect(texts(history[0].values.messages)).toHaveLength(6);
    for (let i = 0; i + 1 < history.length; i++) {
      expect(history[i].parentConfig?.configurable?.checkpoint_id).toBe(history[i + 1].config.configurable?.checkpoint_id);
    }

    // The sidecar holds `messages` as a list that each step appended to.
    const client = new Client(address, { namespace });
    try {
      const ids = history.map((h) => h.config.configurable!.checkpoint_id as string);
      const oldestWithMessages = history.findLastIndex((h) => (h.values.messages ?? []).length > 0);
      expect(texts(history[oldestWithMessages].values.messages)).toEqual(["hi"]);
      const changes = await client.diff("conversation-1", ids[oldestWithMessages], ids[0]);
      const messages = changes.find((ch) => ch.channel === "messages")!;
      expect([messages.lists, messages.appended, Number(messages.fromLength), Number(messages.toLength)]).toEqual([true, true, 1, 6]);
      const last = await client.diff("conversation-1", ids[1], ids[0]);
      const step = last.find((ch) => ch.channel === "messages");
      if (step) expect(step.appended).toBe(true);
    } finally {
      client.close();
      saver2.close();
    }
  });

  it("falls back to the whole value when the server says BASE_MISMATCH", async () => {
    const namespace = `lg-${randomUUID()}`;
    const saver = new SidecarSaver({ address, namespace });
    const graph = buildGraph(saver);
    const config = { configurable: { thread_id: "t" } };
    await graph.invoke({ messages: [new HumanMessage("one")] }, config);
    // Corrupt every cached root once the run has read its checkpoint (a read refreshes what the saver knows
    // of it): the next keeps and append deltas name a base root the server does not have.
    const read = saver.getTuple.bind(saver);
    saver.getTuple = async (c) => {
      const tuple = await read(c);
      for (const channels of (saver as unknown as { cache: Map<string, Map<string, { root: Uint8Array }>> }).cache.values()) {
        for (const ch of channels.values()) ch.root = new Uint8Array(32).fill(7);
      }
      return tuple;
    };
    const out = await graph.invoke(new Command({ resume: "ok" }), config);
    expect(texts(out.messages)).toEqual(["one", "echo: one", "review: ok"]);
    expect(saver.stats.baseMismatchRetries).toBeGreaterThan(0);
    saver.close();
  });
});
