/**
 * The client's `token` and `tls` options against a sidecar started with `--auth-file` and TLS
 * (certificates made by the repo's tests/certs.py, tokens by `sidecar token`).
 */
import { execFileSync } from "node:child_process";
import { randomUUID } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AgentStateError, Client, PermissionDenied, Unauthenticated, Unavailable } from "../src/index.js";
import { SidecarSaver } from "../src/langgraph.js";
import { emptyCheckpoint } from "@langchain/langgraph-checkpoint";
import { REPO, Sidecar, freePort, sidecarPython } from "./sidecar.js";

const NS = "team-ts";
const dir = mkdtempSync(join(tmpdir(), "agentstate-ts-auth-"));
let sc: Sidecar;
let tcp: string;
let port: number;
let writer: string;
let reader: string;

function token(role: string, ns: string): string {
  const out = execFileSync(sidecarPython(), ["-m", "sidecar", "token", "--role", role, "--namespace", ns,
    "--append", join(dir, "auth.toml")], { cwd: REPO, encoding: "utf8" });
  return out.trim();
}

const ca = () => readFileSync(join(dir, "pki", "ca.pem"));

async function expectDenied(p: Promise<unknown>, cls: Function, reason: string): Promise<void> {
  try {
    await p;
  } catch (e) {
    expect(e).toBeInstanceOf(cls);
    expect((e as AgentStateError).reason).toBe(reason);
    return;
  }
  throw new Error("expected an error");
}

beforeAll(async () => {
  execFileSync(sidecarPython(), [join(REPO, "tests", "certs.py"), join(dir, "pki")]);
  writer = token("write", NS);
  reader = token("read", NS);
  port = await freePort();
  tcp = `127.0.0.1:${port}`;
  sc = new Sidecar(join(dir, "data"));
  sc.extraListen = [tcp];
  sc.extraArgs = ["--auth-file", join(dir, "auth.toml"), "--tls-cert", join(dir, "pki", "server.pem"),
    "--tls-key", join(dir, "pki", "server.key")];
  await sc.start();
}, 60000);

afterAll(async () => {
  await sc?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("token and TLS options", () => {
  it("a token over TLS reads and writes its namespace", async () => {
    const c = new Client(tcp, { namespace: NS, token: writer, tls: { rootCerts: ca() } });
    try {
      const id = `t-${randomUUID()}`;
      await c.putCheckpoint(id, { messages: ["hi"] });
      expect(await c.getValues(id)).toEqual({ messages: ["hi"] });
      // a server stream carries the token too
      await c.events.appendEvents({ namespace: NS, threadId: id, events: [{ type: "note" }] });
      for await (const resp of c.events.watchEvents({ namespace: NS, threadId: id, follow: false })) {
        expect(resp.event?.type).toBe("note");
        break;
      }
    } finally {
      c.close();
    }
    const byName = new Client(`localhost:${port}`, { namespace: NS, token: writer, tls: { rootCerts: ca() } });
    try {
      expect((await byName.listThreads().next()).done).toBe(false);
    } finally {
      byName.close();
    }
  });

  it("is denied without a token, with a wrong one, in another namespace, and read-only on a write", async () => {
    const none = new Client(tcp, { namespace: NS, tls: { rootCerts: ca() }, timeoutMs: 5000 });
    const wrong = new Client(tcp, { namespace: NS, token: "ast_wrong", tls: { rootCerts: ca() }, timeoutMs: 5000 });
    const other = new Client(sc.address, { namespace: "elsewhere", token: writer, timeoutMs: 5000 });
    const ro = new Client(sc.address, { namespace: NS, token: reader, timeoutMs: 5000 });
    try {
      await expectDenied(none.getThread("x"), Unauthenticated, "AUTH_REQUIRED");
      await expectDenied(wrong.getThread("x"), Unauthenticated, "AUTH_INVALID");
      await expectDenied(other.putCheckpoint("x", { n: 1 }), PermissionDenied, "NAMESPACE_DENIED");
      await expectDenied(ro.putCheckpoint("x", { n: 1 }), PermissionDenied, "ROLE_DENIED");
      await expectDenied(ro.getThread("x-missing"), AgentStateError, "THREAD_NOT_FOUND"); // reads pass
    } finally {
      for (const c of [none, wrong, other, ro]) c.close();
    }
  });

  it("plaintext to the TLS port fails; a token is never sent in plaintext to a remote address", async () => {
    const plain = new Client(tcp, { namespace: NS, token: writer, retry: { maxAttempts: 1 }, timeoutMs: 2000, waitForReady: false });
    try {
      await expect(plain.getThread("x")).rejects.toBeInstanceOf(Unavailable);
    } finally {
      plain.close();
    }
    expect(() => new Client("sidecar.internal:7421", { token: writer })).toThrow(/only over TLS or a local connection/);
  });

  it("the LangGraph saver passes token and TLS through", async () => {
    const saver = new SidecarSaver({ address: tcp, namespace: NS, token: writer, tls: { rootCerts: ca() } });
    try {
      const config = { configurable: { thread_id: `lg-${randomUUID()}`, checkpoint_ns: "" } };
      const cp = emptyCheckpoint();
      await saver.put(config, cp, { source: "input", step: 0, parents: {} }, {});
      expect((await saver.getTuple(config))?.checkpoint.id).toBe(cp.id);
    } finally {
      saver.close();
    }
    const denied = new SidecarSaver({ address: sc.address, namespace: NS, token: reader, timeoutMs: 5000 });
    try {
      const config = { configurable: { thread_id: "lg-ro", checkpoint_ns: "" } };
      await expectDenied(denied.put(config, emptyCheckpoint(), { source: "input", step: 0, parents: {} }, {}),
        PermissionDenied, "ROLE_DENIED");
    } finally {
      denied.close();
    }
  });
});

describe("mutual TLS", () => {
  it("a client certificate mapped in the auth file reads its namespace, and only reads", async () => {
    const mdir = mkdtempSync(join(tmpdir(), "agentstate-ts-mtls-"));
    execFileSync(sidecarPython(), [join(REPO, "tests", "certs.py"), join(mdir, "pki"), "agent-ts"]);
    const authFile = join(mdir, "auth.toml");
    writeFileSync(authFile, '[[client_cert]]\nsubject = "O=Agent State Tests,CN=agent-ts"\nrole = "read"\nnamespaces = ["team-ts"]\n');
    const mport = await freePort();
    const m = new Sidecar(join(mdir, "data"));
    m.extraListen = [`127.0.0.1:${mport}`];
    m.extraArgs = ["--auth-file", authFile, "--tls-cert", join(mdir, "pki", "server.pem"), "--tls-key", join(mdir, "pki", "server.key"),
      "--tls-client-ca", join(mdir, "pki", "ca.pem")];
    await m.start();
    const pem = (n: string) => readFileSync(join(mdir, "pki", n));
    const tls = { rootCerts: pem("ca.pem"), certChain: pem("agent-ts.pem"), privateKey: pem("agent-ts.key") };
    const c = new Client(`127.0.0.1:${mport}`, { namespace: NS, tls, timeoutMs: 5000 });
    try {
      await expectDenied(c.getThread("missing"), AgentStateError, "THREAD_NOT_FOUND"); // a read gets through
      await expectDenied(c.putCheckpoint("t", { n: 1 }), PermissionDenied, "ROLE_DENIED");
    } finally {
      c.close();
      await m.stop();
      rmSync(mdir, { recursive: true, force: true });
    }
  }, 60000);
});
