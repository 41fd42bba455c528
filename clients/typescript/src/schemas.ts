/**
 * Schema versions and migrations (SchemaService, docs/lifecycle.md): `c.schemas` on a Client, and the
 * migration step builders.
 *
 *   import { steps as s } from "@agentstate/client";
 *   await c.schemas.register("agent", [[], [s.rename("notes", "memo"), s.add(["profile", "tz"], "UTC")]]);
 *   await c.threads.putCheckpoint({ ..., schema: "agent", schemaVersion: 1 });
 *   const cp = (await c.threads.getCheckpoint({ threadId, readSchemaVersion: 2 })).checkpoint;   // migrated
 *   for await (const p of c.schemas.migrateThread(threadId, "agent")) console.log(p.checkpointsMigrated);
 *
 * A path is a channel name or a list of keys from the channel into its maps. Client-side migrations of
 * opaque values are a Python client feature (agentstate.schemas.Migrations).
 */
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { GenService } from "@bufbuild/protobuf/codegenv2";
import type { CallOptions, Stub } from "./rpc.js";
import { encodeField } from "./values.js";
import {
  FailurePolicy,
  SchemaService,
  ValueType,
  type MigrationProgress,
  type MigrationStepSchema,
  type RegisterSchemaResponse,
  type Schema,
} from "./gen/agentstate/v1/schemas_pb.js";

export type SchemaStub = Stub<typeof SchemaService extends GenService<infer S> ? S : never>;
export type MigrationStepInit = MessageInitShape<typeof MigrationStepSchema>;
type Path = string | string[];

const path = (p: Path) => (typeof p === "string" ? [p] : [...p]);
const TYPES = { string: ValueType.STRING, int: ValueType.INT, float: ValueType.FLOAT, bool: ValueType.BOOL, list: ValueType.LIST };
const POLICIES = { fail: FailurePolicy.FAIL, degrade: FailurePolicy.DEGRADE, new_run: FailurePolicy.NEW_RUN };

/** Builders of MigrationStep messages (schemas.proto). */
export const steps = {
  rename: (p: Path, to: string): MigrationStepInit => ({ op: { case: "rename", value: { path: path(p), to } } }),
  drop: (p: Path): MigrationStepInit => ({ op: { case: "drop", value: { path: path(p) } } }),
  add: (p: Path, dflt: unknown): MigrationStepInit =>
    ({ op: { case: "add", value: { path: path(p), default: encodeField(dflt, "default") } } }),
  nest: (fields: string[], into: string, p: Path = []): MigrationStepInit =>
    ({ op: { case: "nest", value: { path: path(p), fields, into } } }),
  unnest: (from: string, fields: string[] = [], p: Path = []): MigrationStepInit =>
    ({ op: { case: "unnest", value: { path: path(p), from, fields } } }),
  convert: (p: Path, to: keyof typeof TYPES): MigrationStepInit =>
    ({ op: { case: "convert", value: { path: path(p), to: TYPES[to] } } }),
  mapItems: (p: Path, ...inner: MigrationStepInit[]): MigrationStepInit =>
    ({ op: { case: "mapItems", value: { path: path(p), steps: inner } } }),
};

export interface RegisterSchemaOptions extends CallOptions {
  minReadableVersion?: number;
  failurePolicy?: keyof typeof POLICIES;
  etag?: string;
  requestId?: string;
}

/** SchemaService calls in a client's namespace. */
export class Schemas {
  constructor(readonly stub: SchemaStub, readonly namespace: string) {}

  /** Create or update a schema: `versions[k]` holds the steps from version k to k+1 (`versions[0]`: none). */
  register(name: string, versions: MigrationStepInit[][], opts: RegisterSchemaOptions = {}): Promise<RegisterSchemaResponse> {
    return this.stub.registerSchema({
      namespace: this.namespace, etag: opts.etag ?? "", requestId: opts.requestId ?? "",
      schema: {
        name, minReadableVersion: opts.minReadableVersion ?? 0,
        failurePolicy: opts.failurePolicy ? POLICIES[opts.failurePolicy] : FailurePolicy.UNSPECIFIED,
        versions: versions.map((stepsOf, i) => ({ version: i + 1, steps: stepsOf })),
      },
    }, opts);
  }

  async get(name: string, opts: CallOptions = {}): Promise<Schema | undefined> {
    return (await this.stub.getSchema({ namespace: this.namespace, name }, opts)).schema;
  }

  async *list(opts: CallOptions & { pageSize?: number } = {}): AsyncGenerator<Schema> {
    let pageToken = "";
    do {
      const resp = await this.stub.listSchemas({ namespace: this.namespace, pageSize: opts.pageSize ?? 0, pageToken }, opts);
      yield* resp.schemas;
      pageToken = resp.nextPageToken;
    } while (pageToken);
  }

  /** Rewrite a thread's checkpoints to `targetVersion` (0: the latest); the progress after each batch. */
  async *migrateThread(threadId: string, schema: string,
    opts: CallOptions & { targetVersion?: number; batchSize?: number } = {}): AsyncGenerator<MigrationProgress> {
    for await (const r of this.stub.migrateThread({ namespace: this.namespace, threadId, schema,
      targetVersion: opts.targetVersion ?? 0, batchSize: opts.batchSize ?? 0 }, opts)) {
      if (r.progress) yield r.progress;
    }
  }

  /** migrateThread for every thread of the namespace. */
  async *migrateNamespace(schema: string,
    opts: CallOptions & { targetVersion?: number; batchSize?: number } = {}): AsyncGenerator<MigrationProgress> {
    for await (const r of this.stub.migrateNamespace({ namespace: this.namespace, schema,
      targetVersion: opts.targetVersion ?? 0, batchSize: opts.batchSize ?? 0 }, opts)) {
      if (r.progress) yield r.progress;
    }
  }
}
