/**
 * One sidecar for the whole test run, unless AGENTSTATE_ADDRESS names one that runs
 * already (the cross-language suite does that). Tests get the address with
 * inject("address").
 */
import type { TestProject } from "vitest/node";
import { Sidecar } from "./sidecar.js";

declare module "vitest" {
  export interface ProvidedContext {
    address: string;
  }
}

let sidecar: Sidecar | undefined;

export async function setup(project: TestProject): Promise<void> {
  let address = process.env.AGENTSTATE_ADDRESS;
  if (!address) {
    sidecar = Sidecar.temp();
    await sidecar.start();
    address = sidecar.address;
  }
  project.provide("address", address);
}

export async function teardown(): Promise<void> {
  await sidecar?.stop();
  sidecar?.cleanup();
}
