/** @agentstate/client: TypeScript client of the Agent State Sidecar (agentstate.v1). */
export * from "./codec.js";
export * from "./errors.js";
export * from "./values.js";
export * from "./client.js";
export * from "./runs.js";
export * from "./conversations.js";
export * from "./memory.js";
export * from "./compaction-worker.js";
export * from "./schemas.js";
export { RULES, ruleOf, ruleLabel, safeAsSent, type Rule, type RuleKind } from "./retries.js";
export { newId } from "./ids.js";
export {
  connect,
  serverStream,
  longLived,
  OWN_CONNECTION,
  type OwnConnection,
  resumable,
  stub,
  withRetries,
  isTransient,
  DEFAULT_RETRY,
  DEFAULT_TIMEOUT_MS,
  RESUME_FOR_MS,
  CHANNEL_OPTIONS,
  isLocalAddress,
  tokenInterceptor,
  type TlsOptions,
  type CallOptions,
  type RetryPolicy,
  type Stub,
} from "./rpc.js";
export * as threadsPb from "./gen/agentstate/v1/threads_pb.js";
export * as valuesPb from "./gen/agentstate/v1/values_pb.js";
export * as adminPb from "./gen/agentstate/v1/admin_pb.js";
export * as errorsPb from "./gen/agentstate/v1/errors_pb.js";
export * as runsPb from "./gen/agentstate/v1/runs_pb.js";
export * as eventsPb from "./gen/agentstate/v1/events_pb.js";
export * as effectsPb from "./gen/agentstate/v1/effects_pb.js";
export * as artifactsPb from "./gen/agentstate/v1/artifacts_pb.js";
export * as conversationsPb from "./gen/agentstate/v1/conversations_pb.js";
export * as memoryPb from "./gen/agentstate/v1/memory_pb.js";
export * as schemasPb from "./gen/agentstate/v1/schemas_pb.js";
export * from "./transfer.js";
export * as transferPb from "./gen/agentstate/v1/transfer_pb.js";
