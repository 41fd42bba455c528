/** The official LangGraph.js checkpointer conformance suite, run against SidecarSaver. */
import { randomUUID } from "node:crypto";
import { inject } from "vitest";
import { validate } from "@langchain/langgraph-checkpoint-validation";
import { SidecarSaver } from "../src/langgraph.js";

const address = inject("address");

validate({
  checkpointerName: "SidecarSaver",
  // Each instance gets a namespace of its own: what one writes, no other reads.
  createCheckpointer: () => new SidecarSaver({ address, namespace: `lgv-${randomUUID()}` }),
  destroyCheckpointer: (saver: SidecarSaver) => saver.close(),
});
