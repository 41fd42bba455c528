/**
 * Typed errors: every failed call throws an AgentStateError subclass carrying the gRPC
 * status code, the agentstate ErrorReason name (from the google.rpc.ErrorInfo in the
 * `grpc-status-details-bin` trailer) and the ErrorInfo metadata ("field", "limit", ...).
 */
import { fromBinary } from "@bufbuild/protobuf";
import { anyUnpack } from "@bufbuild/protobuf/wkt";
import { status as GrpcStatus, type Metadata, type ServiceError } from "@grpc/grpc-js";
import { StatusSchema } from "./gen/google/rpc/status_pb.js";
import { ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";

export { GrpcStatus as Status };

/** The name of a gRPC status code ("NOT_FOUND"). */
export function codeName(code: number): string {
  return (GrpcStatus as unknown as Record<number, string>)[code] ?? `CODE_${code}`;
}

export class AgentStateError extends Error {
  /** The gRPC status code (a number; `codeName` gives its name). */
  readonly code: number;
  /** ErrorReason name, e.g. "THREAD_NOT_FOUND"; empty when the server sent none. */
  readonly reason: string;
  /** ErrorInfo metadata: "field", "limit", "current_etag", "retry_after_ms", ... */
  readonly metadata: Record<string, string>;
  /** The status message from the server. */
  readonly details: string;

  constructor(code: number, details: string, reason = "", metadata: Record<string, string> = {}) {
    super(`${codeName(code)}: ${details}${reason ? ` [${reason}]` : ""}`);
    this.name = new.target.name;
    this.code = code;
    this.details = details;
    this.reason = reason;
    this.metadata = { ...metadata };
  }

  get codeName(): string {
    return codeName(this.code);
  }

  /** The request field (or value path) at fault, when the server named one. */
  get field(): string | undefined {
    return this.metadata.field;
  }
}

export class InvalidArgument extends AgentStateError {}
export class NotFound extends AgentStateError {}
export class AlreadyExists extends AgentStateError {}
export class FailedPrecondition extends AgentStateError {}
export class ResourceExhausted extends AgentStateError {}
export class Aborted extends AgentStateError {}
export class Unavailable extends AgentStateError {}
export class DeadlineExceeded extends AgentStateError {}
export class Cancelled extends AgentStateError {}
export class Internal extends AgentStateError {}
export class Unauthenticated extends AgentStateError {}
export class PermissionDenied extends AgentStateError {}
export class DataLoss extends AgentStateError {}

/**
 * A held run's lease ran out on the holder's clock before a heartbeat got through (the sidecar
 * was unreachable for a whole lease timeout): the run is lost to this holder. Made by the
 * client, not sent by the server; `cause` is the last failure.
 */
export class LeaseExpired extends DeadlineExceeded {
  constructor(details: string) {
    super(GrpcStatus.DEADLINE_EXCEEDED, details);
  }
}

const BY_CODE: Record<number, new (c: number, d: string, r?: string, m?: Record<string, string>) => AgentStateError> = {
  [GrpcStatus.INVALID_ARGUMENT]: InvalidArgument,
  [GrpcStatus.NOT_FOUND]: NotFound,
  [GrpcStatus.ALREADY_EXISTS]: AlreadyExists,
  [GrpcStatus.FAILED_PRECONDITION]: FailedPrecondition,
  [GrpcStatus.RESOURCE_EXHAUSTED]: ResourceExhausted,
  [GrpcStatus.ABORTED]: Aborted,
  [GrpcStatus.UNAVAILABLE]: Unavailable,
  [GrpcStatus.DEADLINE_EXCEEDED]: DeadlineExceeded,
  [GrpcStatus.CANCELLED]: Cancelled,
  [GrpcStatus.INTERNAL]: Internal,
  [GrpcStatus.UNAUTHENTICATED]: Unauthenticated,
  [GrpcStatus.PERMISSION_DENIED]: PermissionDenied,
  [GrpcStatus.DATA_LOSS]: DataLoss,
};

/** Build the AgentStateError of a code, message, reason and metadata. */
export function makeError(code: number, details: string, reason = "", metadata: Record<string, string> = {}): AgentStateError {
  const cls = BY_CODE[code] ?? AgentStateError;
  return new cls(code, details, reason, metadata);
}

function errorInfo(trailers: Metadata | undefined): { reason: string; metadata: Record<string, string> } {
  const raw = trailers?.get("grpc-status-details-bin")?.[0];
  if (!raw || typeof raw === "string") return { reason: "", metadata: {} };
  try {
    const st = fromBinary(StatusSchema, raw);
    for (const detail of st.details) {
      const info = anyUnpack(detail, ErrorInfoSchema);
      if (info) return { reason: info.reason, metadata: { ...info.metadata } };
    }
  } catch {
    // A malformed trailer is not worth hiding the status code for.
  }
  return { reason: "", metadata: {} };
}

/** Turn a grpc-js ServiceError into the matching AgentStateError. */
export function fromServiceError(err: ServiceError | Error): AgentStateError {
  if (err instanceof AgentStateError) return err;
  const e = err as Partial<ServiceError>;
  const code = typeof e.code === "number" ? e.code : GrpcStatus.UNKNOWN;
  const { reason, metadata } = errorInfo(e.metadata);
  return makeError(code, e.details ?? err.message, reason, metadata);
}
