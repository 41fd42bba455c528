/** JavaScript values <-> agentstate.v1 Value messages, and the channel delta helpers. */
import { create } from "@bufbuild/protobuf";
import { Status, InvalidArgument } from "./errors.js";
import { decode, encode, Opaque, opaquePayload, UnsupportedValue } from "./codec.js";
import { ValueSchema, ValueDeltaSchema, type Value, type ValueDelta } from "./gen/agentstate/v1/values_pb.js";
import { ChannelWriteSchema, type ChannelWrite } from "./gen/agentstate/v1/threads_pb.js";

/** Delta for a list channel: keep the first `keepFirst` items (all when undefined), then append `items`. */
export class Append {
  constructor(
    readonly items: unknown[],
    readonly opts: { keepFirst?: number; baseRoot?: Uint8Array } = {},
  ) {}
}

/** Delta for a map channel: set `set` keys and remove `remove` keys. */
export class SetKeys {
  constructor(
    readonly set: Record<string, unknown>,
    readonly remove: string[] = [],
    readonly opts: { baseRoot?: Uint8Array } = {},
  ) {}
}

/**
 * Take the channel's value from the base checkpoint unchanged. With `baseRoot` the server first checks
 * that the base holds that root (FAILED_PRECONDITION / BASE_MISMATCH otherwise): sent as an empty delta.
 */
export class Keep {
  constructor(readonly opts: { baseRoot?: Uint8Array } = {}) {}
}
export const KEEP = new Keep();

/**
 * A structured value already in the agentstate encoding (`encode`'s bytes), sent as is (the server checks
 * it): a value encoded once is not encoded again, and later changes to the object it came from do not
 * reach the request.
 */
export class Encoded {
  constructor(readonly data: Uint8Array) {}
}

/** Encode a JavaScript value as a Value (an Opaque becomes the `opaque` form). */
export function toValue(v: unknown): Value {
  if (v instanceof Opaque) {
    opaquePayload(v.type, v.data); // the same checks the server makes
    return create(ValueSchema, { kind: { case: "opaque", value: { type: v.type, data: v.data } } });
  }
  if (v instanceof Encoded) return create(ValueSchema, { kind: { case: "msgpack", value: v.data } });
  return create(ValueSchema, { kind: { case: "msgpack", value: encode(v) } });
}

/** Decode a Value message (any of its four forms). */
export function fromValue(v: Value | undefined): unknown {
  if (!v) return null;
  switch (v.kind.case) {
    case "msgpack":
      return decode(v.kind.value);
    case "opaque":
      return new Opaque(v.kind.value.type, v.kind.value.data);
    case "list":
      return v.kind.value.items.map(fromValue);
    case "map": {
      // A protobuf map has no order on the wire: the entries take the order of the canonical encoding (keys by
      // their UTF-8 bytes, which is code point order), so a map reads back the same every time (an object still
      // lists integer-like keys first, as JavaScript does).
      const entries = v.kind.value.entries;
      const out: Record<string, unknown> = {};
      for (const k of Object.keys(entries).sort(byCodePoint)) {
        Object.defineProperty(out, k, { value: fromValue(entries[k]), enumerable: true, writable: true, configurable: true });
      }
      return out;
    }
    default:
      return null;
  }
}

/** Orders strings as their UTF-8 bytes order them (by code point; `<` on strings compares UTF-16 units). */
function byCodePoint(a: string, b: string): number {
  const ia = a[Symbol.iterator](), ib = b[Symbol.iterator]();
  for (;;) {
    const x = ia.next(), y = ib.next();
    if (x.done || y.done) return (x.done ? 0 : 1) - (y.done ? 0 : 1);
    const cx = x.value.codePointAt(0)!, cy = y.value.codePointAt(0)!;
    if (cx !== cy) return cx - cy;
  }
}

/** Decode a map<string, Value> (metadata). */
export function decodeMap(entries: { [key: string]: Value } | undefined): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(entries ?? {})) {
    Object.defineProperty(out, k, { value: fromValue(v), enumerable: true, writable: true, configurable: true });
  }
  return out;
}

/** The client-side twin of the server's INVALID_ARGUMENT / UNSUPPORTED_VALUE error. */
export function invalidValue(field: string, e: UnsupportedValue): InvalidArgument {
  const path = field + e.path.slice(1);
  return new InvalidArgument(Status.INVALID_ARGUMENT, `${path}: ${e.reason}`, "UNSUPPORTED_VALUE", { field: path });
}

function guarded<T>(field: string, fn: () => T): T {
  try {
    return fn();
  } catch (e) {
    if (e instanceof UnsupportedValue) throw invalidValue(field, e);
    throw e;
  }
}

/** toValue, throwing InvalidArgument (reason UNSUPPORTED_VALUE) that names `field` and the path. */
export function encodeField(v: unknown, field: string): Value {
  return guarded(field, () => toValue(v));
}

/** Encode a map of values (metadata, filters), naming `field` on errors. */
export function encodeMap(values: Record<string, unknown> | undefined, field: string): { [key: string]: Value } {
  const out: { [key: string]: Value } = {};
  for (const [k, v] of Object.entries(values ?? {})) out[k] = encodeField(v, `${field}['${k}']`);
  return out;
}

/** A ChannelWrite from a value, Encoded, Append, SetKeys or Keep. */
export function channelWrite(v: unknown, field: string): ChannelWrite {
  return guarded(field, () => {
    if (v instanceof Keep) {
      if (v.opts.baseRoot === undefined) return create(ChannelWriteSchema, { op: { case: "keep", value: true } });
      const check = create(ValueDeltaSchema, { baseRoot: v.opts.baseRoot });
      return create(ChannelWriteSchema, { op: { case: "delta", value: check } });
    }
    if (v instanceof Append) {
      const delta: ValueDelta = create(ValueDeltaSchema, {
        baseRoot: v.opts.baseRoot ?? new Uint8Array(0),
        keepFirst: v.opts.keepFirst === undefined ? undefined : BigInt(v.opts.keepFirst),
        append: v.items.map((item, i) => {
          try {
            return toValue(item);
          } catch (e) {
            throw e instanceof UnsupportedValue ? e.under(`.append[${i}]`) : e;
          }
        }),
      });
      return create(ChannelWriteSchema, { op: { case: "delta", value: delta } });
    }
    if (v instanceof SetKeys) {
      const set: { [key: string]: Value } = {};
      for (const [k, x] of Object.entries(v.set)) {
        try {
          set[k] = toValue(x);
        } catch (e) {
          throw e instanceof UnsupportedValue ? e.under(`.set['${k}']`) : e;
        }
      }
      const delta = create(ValueDeltaSchema, { baseRoot: v.opts.baseRoot ?? new Uint8Array(0), set, delete: v.remove });
      return create(ChannelWriteSchema, { op: { case: "delta", value: delta } });
    }
    if (Array.isArray(v) && v.length > 0 && v.every((x) => x instanceof Opaque)) {
      // A list of opaque items is sent item by item (one stored blob per element).
      const items = v.map((x) => toValue(x));
      return create(ChannelWriteSchema, {
        op: { case: "value", value: create(ValueSchema, { kind: { case: "list", value: { items } } }) },
      });
    }
    return create(ChannelWriteSchema, { op: { case: "value", value: toValue(v) } });
  });
}
