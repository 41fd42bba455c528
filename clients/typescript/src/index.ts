/** @agentstate/client: TypeScript client of the Agent State Sidecar (agentstate.v1). */
export * from "./codec.js";
export * from "./errors.js";
export * from "./values.js";
export * from "./client.js";
export { newId } from "./ids.js";
export {
  connect,
  serverStream,
  resumable,
  stub,
  withRetries,
  isTransient,
  DEFAULT_RETRY,
  CHANNEL_OPTIONS,
  type CallOptions,
  type RetryPolicy,
  type Stub,
} from "./rpc.js";
export * as threadsPb from "./gen/agentstate/v1/threads_pb.js";
export * as valuesPb from "./gen/agentstate/v1/values_pb.js";
export * as adminPb from "./gen/agentstate/v1/admin_pb.js";
export * as errorsPb from "./gen/agentstate/v1/errors_pb.js";
