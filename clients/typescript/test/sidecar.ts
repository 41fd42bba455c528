/** Start and stop `sidecar serve` child processes for tests (the Python server of this repo). */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, openSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import * as grpc from "@grpc/grpc-js";

/** The repo (the folder with the sidecar package), from test/ or from its build under dist/test/. */
export const REPO = ((): string => {
  for (let dir = import.meta.dirname; ; dir = resolve(dir, "..")) {
    if (existsSync(join(dir, "sidecar", "__main__.py"))) return dir;
    if (dir === resolve(dir, "..")) return resolve(import.meta.dirname, "../../..");
  }
})();

/** The Python that runs the sidecar: $SIDECAR_PYTHON, the repo's .venv, or python3. */
export function sidecarPython(): string {
  if (process.env.SIDECAR_PYTHON) return process.env.SIDECAR_PYTHON;
  const venv = join(REPO, ".venv", "bin", "python");
  return existsSync(venv) ? venv : "python3";
}

/** A TCP port that was free a moment ago. */
export async function freePort(): Promise<number> {
  const { createServer } = await import("node:net");
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

export class Sidecar {
  proc?: ChildProcess;
  readonly socket: string;
  readonly address: string;
  readonly log: string;
  /** Extra `--listen` addresses (e.g. "127.0.0.1:PORT"). */
  extraListen: string[] = [];
  /** Extra `sidecar serve` arguments (e.g. "--watchdog-interval", "0.05"). */
  extraArgs: string[] = [];
  constructor(readonly dataDir: string) {
    this.socket = join(dataDir, "sidecar.sock");
    this.address = `unix:${this.socket}`;
    this.log = `${dataDir}.log`;
  }

  static temp(): Sidecar {
    return new Sidecar(join(mkdtempSync(join(tmpdir(), "agentstate-ts-")), "data"));
  }

  /** Spawn without waiting. */
  spawn(): void {
    const fd = openSync(this.log, "a");
    this.proc = spawn(sidecarPython(), ["-m", "sidecar", "serve", "--data-dir", this.dataDir, "--listen", this.address, ...this.extraListen.flatMap((a) => ["--listen", a]), "--grace", "2", ...this.extraArgs], {
      cwd: REPO,
      stdio: ["ignore", fd, fd],
    });
    // Never outlive the test process, however it ends.
    const child = this.proc;
    process.once("exit", () => child.kill("SIGTERM"));
  }

  async start(timeoutMs = 30000): Promise<this> {
    this.spawn();
    await this.ready(timeoutMs);
    return this;
  }

  async ready(timeoutMs = 30000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (this.proc?.exitCode !== null && this.proc?.exitCode !== undefined) {
        throw new Error(`sidecar exited ${this.proc.exitCode}: ${readFileSync(this.log, "utf8")}`);
      }
      if (existsSync(this.socket)) { // (a killed sidecar's socket stays until the new one replaces it)
        const c = new grpc.Client(this.address, grpc.credentials.createInsecure(), {
          "grpc.initial_reconnect_backoff_ms": 50,
          "grpc.max_reconnect_backoff_ms": 200,
        });
        const ok = await new Promise<boolean>((r) => c.waitForReady(new Date(Date.now() + 1000), (e) => r(!e)));
        c.close();
        if (ok) return;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`sidecar did not start: ${readFileSync(this.log, "utf8")}`);
  }

  /** SIGKILL (a crash: no cleanup) and wait for the exit. */
  async kill(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGKILL");
    await exited;
  }

  /** SIGTERM and wait for the exit. */
  async stop(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null || p.signalCode !== null) return;
    const exited = new Promise((r) => p.once("exit", r));
    p.kill("SIGTERM");
    await exited;
  }

  cleanup(): void {
    rmSync(resolve(this.dataDir, ".."), { recursive: true, force: true });
  }
}
