/**
 * The agentstate value encoding (docs/encoding.md) for JavaScript values.
 *
 * A structured value is MessagePack with six extension types: 1 big int,
 * 2 datetime, 3 UUID, 4 decimal, 5 set, 6 opaque. `encode` produces the
 * canonical form the sidecar stores (shortest ints, float64 floats, one NaN,
 * map keys sorted by their UTF-8 bytes, sets sorted and deduplicated), so a
 * value has the same bytes, and the same content hash, in every language.
 * `decode` reads every type back without loss: `encode(decode(b))` equals `b`
 * for any canonical `b`, which is what lets one language rewrite what another
 * wrote byte for byte.
 *
 * JavaScript representations (see README "Value types per language"):
 *   nil            null (undefined is encoded as nil too)
 *   bool           boolean
 *   int            number when it is a safe integer, otherwise bigint; any bigint
 *                  encodes as an int (ext 1 outside [-2^63, 2^64-1])
 *   float          number when not integral; integral floats (1.0, -0.0, 2^53)
 *                  read back as `Float`, because a JS number cannot tell 1 from 1.0
 *   str            string (must be well-formed UTF-16: lone surrogates are refused)
 *   bin            Uint8Array
 *   array          Array
 *   map            plain object (or Map with string keys on input)
 *   datetime       `DateTime` (microseconds, naive / offset / zone); a Date encodes
 *                  as a UTC datetime with millisecond precision
 *   UUID           `Uuid`;  decimal `Decimal` (canonical text);  set `Set`;
 *   opaque         `Opaque`
 *
 * Written without a MessagePack library on purpose: the generic decoders
 * return integral floats as plain numbers, which would turn 1.0 into 1 on a
 * rewrite and change the value's hash. Tests cross-check these bytes with
 * @msgpack/msgpack and the shared golden vectors.
 */

export const EXT_BIGINT = 1;
export const EXT_DATETIME = 2;
export const EXT_UUID = 3;
export const EXT_DECIMAL = 4;
export const EXT_SET = 5;
export const EXT_OPAQUE = 6;
/** Containers (lists, maps, sets) may nest this deep. */
export const MAX_DEPTH = 64;

const INT64_MIN = -(2n ** 63n);
const UINT64_MAX = 2n ** 64n - 1n;
/** Microseconds of 0001-01-01T00:00:00 and 9999-12-31T23:59:59.999999 since the epoch. */
export const MICROS_MIN = -62135596800000000n;
export const MICROS_MAX = 253402300799999999n;
const OFFSET_LIMIT = 86400;

/** A value cannot be encoded or decoded; `path` locates it (`$` is the value itself). */
export class UnsupportedValue extends Error {
  constructor(readonly reason: string, readonly path: string = "$") {
    super(`${path}: ${reason}`);
    this.name = "UnsupportedValue";
  }
  /** The same error seen from one level up (`step` is `[0]` or `['key']`). */
  under(step: string): UnsupportedValue {
    return new UnsupportedValue(this.reason, "$" + step + this.path.slice(1));
  }
}

/** A float64 whose value happens to be integral (1.0, -0.0): JS numbers cannot say so themselves. */
export class Float {
  constructor(readonly value: number) {}
  valueOf(): number {
    return this.value;
  }
  toString(): string {
    return Object.is(this.value, -0) ? "-0.0" : Number.isInteger(this.value) ? `${this.value}.0` : String(this.value);
  }
}

/** A framework's own serialisation, stored verbatim; `type` names the format. */
export class Opaque {
  readonly data: Uint8Array;
  constructor(readonly type: string, data: Uint8Array) {
    // Keep a plain Uint8Array (not a Node Buffer view) so values compare equal everywhere.
    this.data = plainBytes(data);
  }
}

/** `b` as a plain Uint8Array (a Buffer becomes a Uint8Array over the same memory). */
export function plainBytes(b: Uint8Array): Uint8Array {
  return b instanceof Uint8Array && Object.getPrototypeOf(b) !== Uint8Array.prototype
    ? new Uint8Array(b.buffer, b.byteOffset, b.byteLength)
    : b;
}

/** A UUID (16 bytes). */
export class Uuid {
  readonly bytes: Uint8Array;
  constructor(bytes: Uint8Array) {
    if (bytes.length !== 16) throw new UnsupportedValue("UUID must hold 16 bytes");
    this.bytes = Uint8Array.from(bytes);
  }
  static parse(text: string): Uuid {
    const hex = text.replace(/^urn:uuid:/i, "").replace(/[{}-]/g, "");
    if (!/^[0-9a-fA-F]{32}$/.test(hex)) throw new UnsupportedValue(`not a UUID: ${JSON.stringify(text)}`);
    return new Uuid(hexToBytes(hex));
  }
  toString(): string {
    const h = bytesToHex(this.bytes);
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  }
}

/**
 * A decimal number, kept as its canonical text: what Python's `str(Decimal(text))`
 * gives, so `1.10` and `1.1` stay distinct and `1.1e0` becomes `1.1`.
 */
export class Decimal {
  readonly text: string;
  constructor(text: string) {
    this.text = canonicalDecimal(text);
  }
  toString(): string {
    return this.text;
  }
}

export type DateTimeKind = "naive" | "offset" | "zone";

/**
 * A datetime with microsecond precision. `micros` counts from 1970-01-01T00:00:00:
 * of the UTC instant (offset, zone) or of the wall clock read as UTC (naive).
 * `offsetSeconds` is the UTC offset at that instant; `zone` an IANA name.
 */
export class DateTime {
  constructor(
    readonly micros: bigint,
    readonly kind: DateTimeKind = "offset",
    readonly offsetSeconds: number = 0,
    readonly zone: string = "",
  ) {
    if (micros < MICROS_MIN || micros > MICROS_MAX) throw new UnsupportedValue("datetime out of range");
    if (kind !== "naive" && !(Number.isInteger(offsetSeconds) && Math.abs(offsetSeconds) < OFFSET_LIMIT)) {
      throw new UnsupportedValue("datetime UTC offset must be whole seconds under 24 hours");
    }
    if (kind === "zone" && !(zone.length > 0 && utf8(zone).length <= 255)) {
      throw new UnsupportedValue("datetime zone name must be 1 to 255 bytes");
    }
    if (kind === "naive") this.offsetSeconds = 0;
    if (kind !== "zone") this.zone = "";
  }

  /** The instant of a Date, as a UTC datetime (millisecond precision). */
  static fromDate(date: Date): DateTime {
    const ms = date.getTime();
    if (Number.isNaN(ms)) throw new UnsupportedValue("invalid Date");
    return new DateTime(BigInt(ms) * 1000n, "offset", 0);
  }

  /** An instant (Date or epoch microseconds) seen in an IANA zone (offset from the runtime's tz database). */
  static inZone(instant: Date | bigint, zone: string): DateTime {
    const micros = typeof instant === "bigint" ? instant : BigInt(instant.getTime()) * 1000n;
    return new DateTime(micros, "zone", zoneOffsetSeconds(micros, zone), zone);
  }

  /**
   * Parse ISO 8601 `YYYY-MM-DDTHH:MM:SS[.ffffff][Z|±HH:MM[:SS]]`: without an offset the
   * result is naive. A trailing `[Zone/Name]` makes a zoned datetime (the offset, when
   * given, must match the zone; when missing it is looked up).
   */
  static parse(text: string): DateTime {
    const m = /^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,6}))?(Z|[+-]\d{2}:\d{2}(?::\d{2})?)?(?:\[([^\]]+)\])?$/.exec(
      text,
    );
    if (!m) throw new UnsupportedValue(`not an ISO datetime: ${JSON.stringify(text)}`);
    const wall = civilMicros(+m[1], +m[2], +m[3], +m[4], +m[5], +m[6], Number((m[7] ?? "").padEnd(6, "0")));
    const off = m[8];
    const zone = m[9];
    if (off === undefined && zone === undefined) return new DateTime(wall, "naive");
    let offset = 0;
    if (off !== undefined && off !== "Z") {
      const sign = off[0] === "-" ? -1 : 1;
      const [h, mi, s] = off.slice(1).split(":").map(Number);
      offset = sign * (h * 3600 + mi * 60 + (s ?? 0));
    }
    if (zone === undefined) return new DateTime(wall - BigInt(offset) * 1000000n, "offset", offset);
    if (off !== undefined) return new DateTime(wall - BigInt(offset) * 1000000n, "zone", offset, zone);
    // Wall time in a zone: try the offsets the zone has around then (earliest instant wins).
    const guess = wall - BigInt(zoneOffsetSeconds(wall, zone)) * 1000000n;
    for (const candidate of [guess - 86400000000n, guess, guess + 86400000000n]) {
      const o = zoneOffsetSeconds(candidate, zone);
      const instant = wall - BigInt(o) * 1000000n;
      if (zoneOffsetSeconds(instant, zone) === o) return new DateTime(instant, "zone", o, zone);
    }
    return new DateTime(guess, "zone", zoneOffsetSeconds(guess, zone), zone);
  }

  /** The instant as a Date (microseconds below a millisecond are dropped; naive is read as UTC). */
  toDate(): Date {
    const ms = this.micros >= 0n ? this.micros / 1000n : -((-this.micros + 999n) / 1000n);
    return new Date(Number(ms));
  }

  /** ISO 8601 of the wall time, with the offset (and `[zone]`) unless naive. */
  toString(): string {
    const wall = this.kind === "naive" ? this.micros : this.micros + BigInt(this.offsetSeconds) * 1000000n;
    let s = formatCivil(wall);
    if (this.kind !== "naive") s += formatOffset(this.offsetSeconds);
    if (this.kind === "zone") s += `[${this.zone}]`;
    return s;
  }

  /** The extension payload (docs/encoding.md, ext 2). */
  payload(): Uint8Array {
    const flag = this.kind === "naive" ? 0 : this.kind === "offset" ? 1 : 2;
    const zone = this.kind === "zone" ? utf8(this.zone) : new Uint8Array(0);
    const out = new Uint8Array(flag === 0 ? 9 : 13 + zone.length);
    const view = new DataView(out.buffer);
    out[0] = flag;
    view.setBigInt64(1, this.micros);
    if (flag !== 0) {
      view.setInt32(9, this.offsetSeconds);
      out.set(zone, 13);
    }
    return out;
  }
}

// ---------------------------------------------------------------- helpers

const textEncoder = new TextEncoder();
const textDecoder = new TextDecoder("utf-8", { fatal: true });

function utf8(s: string): Uint8Array {
  return textEncoder.encode(s);
}

export function bytesToHex(b: Uint8Array): string {
  let s = "";
  for (const x of b) s += x.toString(16).padStart(2, "0");
  return s;
}

export function hexToBytes(hex: string): Uint8Array {
  if (hex.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(hex)) throw new Error(`bad hex: ${hex.slice(0, 20)}`);
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

/** Compare byte strings like Python's bytes (memcmp, then length). */
export function compareBytes(a: Uint8Array, b: Uint8Array): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return a[i] - b[i];
  return a.length - b.length;
}

function reprKey(key: string): string {
  return `['${key.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}']`;
}

const DAY_MICROS = 86400000000n;

function daysFromCivil(y: number, m: number, d: number): number {
  // Howard Hinnant's days_from_civil (proleptic Gregorian).
  y -= m <= 2 ? 1 : 0;
  const era = Math.floor(y / 400);
  const yoe = y - era * 400;
  const doy = Math.floor((153 * (m + (m > 2 ? -3 : 9)) + 2) / 5) + d - 1;
  const doe = yoe * 365 + Math.floor(yoe / 4) - Math.floor(yoe / 100) + doy;
  return era * 146097 + doe - 719468;
}

function civilFromDays(z: number): [number, number, number] {
  z += 719468;
  const era = Math.floor(z / 146097);
  const doe = z - era * 146097;
  const yoe = Math.floor((doe - Math.floor(doe / 1460) + Math.floor(doe / 36524) - Math.floor(doe / 146096)) / 365);
  const doy = doe - (365 * yoe + Math.floor(yoe / 4) - Math.floor(yoe / 100));
  const mp = Math.floor((5 * doy + 2) / 153);
  const d = doy - Math.floor((153 * mp + 2) / 5) + 1;
  const m = mp + (mp < 10 ? 3 : -9);
  return [yoe + era * 400 + (m <= 2 ? 1 : 0), m, d];
}

function civilMicros(y: number, mo: number, d: number, h: number, mi: number, s: number, us: number): bigint {
  const dim = [31, (y % 4 === 0 && y % 100 !== 0) || y % 400 === 0 ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
  if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > dim[mo - 1] || h > 23 || mi > 59 || s > 59) {
    throw new UnsupportedValue("datetime field out of range");
  }
  return BigInt(daysFromCivil(y, mo, d)) * DAY_MICROS + BigInt(((h * 60 + mi) * 60 + s) * 1e6 + us);
}

function formatCivil(micros: bigint): string {
  let days = micros / DAY_MICROS;
  let rest = micros % DAY_MICROS;
  if (rest < 0n) {
    rest += DAY_MICROS;
    days -= 1n;
  }
  const [y, m, d] = civilFromDays(Number(days));
  const us = Number(rest % 1000000n);
  const secs = Number(rest / 1000000n);
  const p = (n: number, w = 2) => String(n).padStart(w, "0");
  let s = `${p(y, 4)}-${p(m)}-${p(d)}T${p(Math.floor(secs / 3600))}:${p(Math.floor(secs / 60) % 60)}:${p(secs % 60)}`;
  if (us) s += `.${p(us, 6)}`;
  return s;
}

function formatOffset(seconds: number): string {
  const sign = seconds < 0 ? "-" : "+";
  const a = Math.abs(seconds);
  const p = (n: number) => String(n).padStart(2, "0");
  let s = `${sign}${p(Math.floor(a / 3600))}:${p(Math.floor(a / 60) % 60)}`;
  if (a % 60) s += `:${p(a % 60)}`;
  return s;
}

/** The UTC offset (seconds) of an IANA zone at an instant, from the runtime's ICU data. */
export function zoneOffsetSeconds(micros: bigint, zone: string): number {
  let fmt: Intl.DateTimeFormat;
  try {
    fmt = new Intl.DateTimeFormat("en-US", { timeZone: zone, timeZoneName: "longOffset" });
  } catch {
    throw new UnsupportedValue(`unknown time zone ${JSON.stringify(zone)}`);
  }
  const ms = Number(micros >= 0n ? micros / 1000n : -((-micros + 999n) / 1000n));
  const name = fmt.formatToParts(new Date(ms)).find((p) => p.type === "timeZoneName")?.value ?? "GMT";
  const m = /GMT(?:([+-])(\d{2}):(\d{2})(?::(\d{2}))?)?/.exec(name);
  if (!m || m[1] === undefined) return 0;
  return (m[1] === "-" ? -1 : 1) * (+m[2] * 3600 + +m[3] * 60 + +(m[4] ?? 0));
}

/** Python's `str(Decimal(text))`: the canonical decimal text (raises UnsupportedValue). */
export function canonicalDecimal(text: string): string {
  const t = text.trim();
  const special = /^([+-]?)(inf|infinity|(s?)nan(\d*))$/i.exec(t);
  if (special) {
    const sign = special[1] === "-" ? "-" : "";
    if (special[2].toLowerCase().startsWith("inf")) return `${sign}Infinity`;
    const payload = (special[4] ?? "").replace(/^0+/, "");
    return `${sign}${special[3] ? "sNaN" : "NaN"}${payload}`;
  }
  const m = /^([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(t);
  if (!m || (m[2] === "" && (m[3] ?? "") === "")) throw new UnsupportedValue(`malformed decimal ${JSON.stringify(text)}`);
  const sign = m[1] === "-" ? "-" : "";
  const frac = m[3] ?? "";
  const coeff = (m[2] + frac).replace(/^0+(?=\d)/, "");
  const expBig = BigInt(m[4] ?? "0") - BigInt(frac.length);
  const adjusted = expBig + BigInt(coeff.length - 1);
  let body: string;
  if (expBig <= 0n && adjusted >= -6n) {
    const e = Number(expBig);
    if (e === 0) body = coeff;
    else if (coeff.length > -e) body = `${coeff.slice(0, coeff.length + e)}.${coeff.slice(coeff.length + e)}`;
    else body = `0.${"0".repeat(-e - coeff.length)}${coeff}`;
  } else {
    body = coeff[0] + (coeff.length > 1 ? `.${coeff.slice(1)}` : "") + `E${adjusted >= 0n ? "+" : "-"}${adjusted < 0n ? -adjusted : adjusted}`;
  }
  return sign + body;
}

// ---------------------------------------------------------------- encoder

class Writer {
  buf = new Uint8Array(256);
  view = new DataView(this.buf.buffer);
  pos = 0;
  ensure(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    let size = this.buf.length * 2;
    while (size < this.pos + n) size *= 2;
    const next = new Uint8Array(size);
    next.set(this.buf.subarray(0, this.pos));
    this.buf = next;
    this.view = new DataView(next.buffer);
  }
  u8(x: number): void {
    this.ensure(1);
    this.buf[this.pos++] = x;
  }
  bytes(b: Uint8Array): void {
    this.ensure(b.length);
    this.buf.set(b, this.pos);
    this.pos += b.length;
  }
  u16(x: number): void {
    this.ensure(2);
    this.view.setUint16(this.pos, x);
    this.pos += 2;
  }
  u32(x: number): void {
    this.ensure(4);
    this.view.setUint32(this.pos, x);
    this.pos += 4;
  }
  done(): Uint8Array {
    return this.buf.slice(0, this.pos);
  }
}

function writeInt(w: Writer, n: bigint): void {
  if (n >= 0n) {
    if (n < 128n) w.u8(Number(n));
    else if (n < 256n) (w.u8(0xcc), w.u8(Number(n)));
    else if (n < 65536n) (w.u8(0xcd), w.u16(Number(n)));
    else if (n < 4294967296n) (w.u8(0xce), w.u32(Number(n)));
    else {
      w.u8(0xcf);
      w.ensure(8);
      w.view.setBigUint64(w.pos, n);
      w.pos += 8;
    }
  } else if (n >= -32n) w.u8(Number(n) & 0xff);
  else if (n >= -128n) (w.u8(0xd0), w.u8(Number(n) & 0xff));
  else if (n >= -32768n) (w.u8(0xd1), w.u16(Number(n) & 0xffff));
  else if (n >= -2147483648n) (w.u8(0xd2), w.u32(Number(n) >>> 0));
  else {
    w.u8(0xd3);
    w.ensure(8);
    w.view.setBigInt64(w.pos, n);
    w.pos += 8;
  }
}

function writeFloat(w: Writer, x: number): void {
  w.u8(0xcb);
  w.ensure(8);
  if (Number.isNaN(x)) {
    w.u32(0x7ff80000);
    w.u32(0);
  } else {
    w.view.setFloat64(w.pos, x);
    w.pos += 8;
  }
}

function writeStrHeader(w: Writer, n: number): void {
  if (n < 32) w.u8(0xa0 | n);
  else if (n < 256) (w.u8(0xd9), w.u8(n));
  else if (n < 65536) (w.u8(0xda), w.u16(n));
  else (w.u8(0xdb), w.u32(n));
}

function writeBin(w: Writer, b: Uint8Array): void {
  const n = b.length;
  if (n < 256) (w.u8(0xc4), w.u8(n));
  else if (n < 65536) (w.u8(0xc5), w.u16(n));
  else (w.u8(0xc6), w.u32(n));
  w.bytes(b);
}

function writeArrayHeader(w: Writer, n: number): void {
  if (n < 16) w.u8(0x90 | n);
  else if (n < 65536) (w.u8(0xdc), w.u16(n));
  else (w.u8(0xdd), w.u32(n));
}

function writeMapHeader(w: Writer, n: number): void {
  if (n < 16) w.u8(0x80 | n);
  else if (n < 65536) (w.u8(0xde), w.u16(n));
  else (w.u8(0xdf), w.u32(n));
}

function writeExt(w: Writer, code: number, data: Uint8Array): void {
  const n = data.length;
  const fix: Record<number, number> = { 1: 0xd4, 2: 0xd5, 4: 0xd6, 8: 0xd7, 16: 0xd8 };
  if (fix[n] !== undefined) w.u8(fix[n]);
  else if (n < 256) (w.u8(0xc7), w.u8(n));
  else if (n < 65536) (w.u8(0xc8), w.u16(n));
  else (w.u8(0xc9), w.u32(n));
  w.u8(code);
  w.bytes(data);
}

function writeString(w: Writer, s: string): void {
  if (!s.isWellFormed()) throw new UnsupportedValue("string is not valid Unicode (lone surrogate)");
  const b = utf8(s);
  writeStrHeader(w, b.length);
  w.bytes(b);
}

export function bigintPayload(n: bigint): Uint8Array {
  const magnitude = n >= 0n ? n : ~n;
  const len = Math.floor(magnitude.toString(2).length / 8) + 1;
  const out = new Uint8Array(len);
  let v = BigInt.asUintN(len * 8, n);
  for (let i = len - 1; i >= 0; i--) {
    out[i] = Number(v & 0xffn);
    v >>= 8n;
  }
  return out;
}

export function opaquePayload(type: string, data: Uint8Array): Uint8Array {
  if (typeof type !== "string" || !(data instanceof Uint8Array)) {
    throw new UnsupportedValue("Opaque needs a string type and Uint8Array data");
  }
  if (!type.isWellFormed()) throw new UnsupportedValue("opaque type is not valid Unicode");
  const name = utf8(type);
  if (name.length < 1 || name.length > 255) throw new UnsupportedValue("opaque type must be 1 to 255 UTF-8 bytes");
  const out = new Uint8Array(1 + name.length + data.length);
  out[0] = name.length;
  out.set(name, 1);
  out.set(data, 1 + name.length);
  return out;
}

function isPlainObject(v: object): v is Record<string, unknown> {
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

function typeName(v: unknown): string {
  if (v === null || typeof v !== "object") return typeof v;
  return (v as object).constructor?.name ?? "object";
}

function entriesOf(v: Map<unknown, unknown> | Record<string, unknown>): [string, unknown][] {
  if (v instanceof Map) {
    const out: [string, unknown][] = [];
    for (const [k, x] of v) {
      if (typeof k !== "string") throw new UnsupportedValue(`map key ${String(k)} is not a string`);
      out.push([k, x]);
    }
    return out;
  }
  return Object.keys(v).map((k) => [k, v[k]]);
}

function writeValue(w: Writer, v: unknown, depth: number): void {
  switch (typeof v) {
    case "undefined":
      w.u8(0xc0);
      return;
    case "boolean":
      w.u8(v ? 0xc3 : 0xc2);
      return;
    case "number":
      if (Number.isSafeInteger(v) && !Object.is(v, -0)) writeInt(w, BigInt(v));
      else writeFloat(w, v);
      return;
    case "bigint":
      if (v >= INT64_MIN && v <= UINT64_MAX) writeInt(w, v);
      else writeExt(w, EXT_BIGINT, bigintPayload(v));
      return;
    case "string":
      writeString(w, v);
      return;
    case "object":
      break;
    default:
      throw new UnsupportedValue(`unsupported type ${typeof v}`);
  }
  if (v === null) {
    w.u8(0xc0);
    return;
  }
  if (v instanceof Float) return writeFloat(w, v.value);
  if (v instanceof Uint8Array) return writeBin(w, v);
  if (Array.isArray(v)) {
    if (depth >= MAX_DEPTH) throw new UnsupportedValue(`nested deeper than ${MAX_DEPTH}`);
    writeArrayHeader(w, v.length);
    for (let i = 0; i < v.length; i++) {
      try {
        writeValue(w, v[i], depth + 1);
      } catch (e) {
        throw e instanceof UnsupportedValue ? e.under(`[${i}]`) : e;
      }
    }
    return;
  }
  if (v instanceof DateTime) return writeExt(w, EXT_DATETIME, v.payload());
  if (v instanceof Date) return writeExt(w, EXT_DATETIME, DateTime.fromDate(v).payload());
  if (v instanceof Uuid) return writeExt(w, EXT_UUID, v.bytes);
  if (v instanceof Decimal) return writeExt(w, EXT_DECIMAL, utf8(v.text));
  if (v instanceof Opaque) return writeExt(w, EXT_OPAQUE, opaquePayload(v.type, v.data));
  if (v instanceof Set) {
    if (depth >= MAX_DEPTH) throw new UnsupportedValue(`nested deeper than ${MAX_DEPTH}`);
    return writeExt(w, EXT_SET, setPayload([...v], depth + 1));
  }
  if (v instanceof Map || isPlainObject(v)) {
    if (depth >= MAX_DEPTH) throw new UnsupportedValue(`nested deeper than ${MAX_DEPTH}`);
    const entries = entriesOf(v).map(([k, x]) => {
      if (!k.isWellFormed()) throw new UnsupportedValue("map key is not valid Unicode (lone surrogate)");
      return [utf8(k), k, x] as const;
    });
    entries.sort((a, b) => compareBytes(a[0], b[0]));
    writeMapHeader(w, entries.length);
    for (const [kb, k, x] of entries) {
      writeStrHeader(w, kb.length);
      w.bytes(kb);
      try {
        writeValue(w, x, depth + 1);
      } catch (e) {
        throw e instanceof UnsupportedValue ? e.under(reprKey(k)) : e;
      }
    }
    return;
  }
  throw new UnsupportedValue(`unsupported type ${typeName(v)}`);
}

function setPayload(items: unknown[], depth: number): Uint8Array {
  const encoded: Uint8Array[] = [];
  items.forEach((item, i) => {
    const w = new Writer();
    try {
      writeValue(w, item, depth);
    } catch (e) {
      throw e instanceof UnsupportedValue ? e.under(`{set}[${i}]`) : e;
    }
    encoded.push(w.done());
  });
  encoded.sort(compareBytes);
  const unique = encoded.filter((b, i) => i === 0 || compareBytes(b, encoded[i - 1]) !== 0);
  const w = new Writer();
  writeArrayHeader(w, unique.length);
  for (const b of unique) w.bytes(b);
  return w.done();
}

/** The canonical encoding of a JavaScript value (throws UnsupportedValue naming the path). */
export function encode(value: unknown): Uint8Array {
  const w = new Writer();
  writeValue(w, value, 0);
  return w.done();
}

// ---------------------------------------------------------------- decoder

class Reader {
  pos = 0;
  readonly view: DataView;
  constructor(readonly buf: Uint8Array) {
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  }
  need(n: number): void {
    if (this.pos + n > this.buf.length) throw new UnsupportedValue("not valid MessagePack: truncated");
  }
  u8(): number {
    this.need(1);
    return this.buf[this.pos++];
  }
  u16(): number {
    this.need(2);
    const x = this.view.getUint16(this.pos);
    this.pos += 2;
    return x;
  }
  u32(): number {
    this.need(4);
    const x = this.view.getUint32(this.pos);
    this.pos += 4;
    return x;
  }
  take(n: number): Uint8Array {
    this.need(n);
    const out = this.buf.slice(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }
}

function intValue(n: bigint): number | bigint {
  return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n;
}

function floatValue(x: number): number | Float {
  return Number.isInteger(x) || Object.is(x, -0) ? new Float(x) : x;
}

function str(bytes: Uint8Array): string {
  try {
    return textDecoder.decode(bytes);
  } catch {
    throw new UnsupportedValue("string is not valid UTF-8");
  }
}

function readValue(r: Reader, depth: number): unknown {
  const b = r.u8();
  if (b < 0x80) return b;
  if (b >= 0xe0) return b - 0x100;
  if ((b & 0xe0) === 0xa0) return str(r.take(b & 0x1f));
  if ((b & 0xf0) === 0x90) return readArray(r, b & 0x0f, depth);
  if ((b & 0xf0) === 0x80) return readMap(r, b & 0x0f, depth);
  switch (b) {
    case 0xc0:
      return null;
    case 0xc2:
      return false;
    case 0xc3:
      return true;
    case 0xc4:
      return r.take(r.u8());
    case 0xc5:
      return r.take(r.u16());
    case 0xc6:
      return r.take(r.u32());
    case 0xc7:
      return readExt(r, r.u8(), depth);
    case 0xc8:
      return readExt(r, r.u16(), depth);
    case 0xc9:
      return readExt(r, r.u32(), depth);
    case 0xca: {
      r.need(4);
      const x = r.view.getFloat32(r.pos);
      r.pos += 4;
      return floatValue(x);
    }
    case 0xcb: {
      r.need(8);
      const x = r.view.getFloat64(r.pos);
      r.pos += 8;
      return floatValue(x);
    }
    case 0xcc:
      return r.u8();
    case 0xcd:
      return r.u16();
    case 0xce:
      return r.u32();
    case 0xcf: {
      r.need(8);
      const x = r.view.getBigUint64(r.pos);
      r.pos += 8;
      return intValue(x);
    }
    case 0xd0: {
      const x = r.u8();
      return x >= 0x80 ? x - 0x100 : x;
    }
    case 0xd1: {
      const x = r.u16();
      return x >= 0x8000 ? x - 0x10000 : x;
    }
    case 0xd2:
      return r.u32() | 0;
    case 0xd3: {
      r.need(8);
      const x = r.view.getBigInt64(r.pos);
      r.pos += 8;
      return intValue(x);
    }
    case 0xd4:
      return readExt(r, 1, depth);
    case 0xd5:
      return readExt(r, 2, depth);
    case 0xd6:
      return readExt(r, 4, depth);
    case 0xd7:
      return readExt(r, 8, depth);
    case 0xd8:
      return readExt(r, 16, depth);
    case 0xd9:
      return str(r.take(r.u8()));
    case 0xda:
      return str(r.take(r.u16()));
    case 0xdb:
      return str(r.take(r.u32()));
    case 0xdc:
      return readArray(r, r.u16(), depth);
    case 0xdd:
      return readArray(r, r.u32(), depth);
    case 0xde:
      return readMap(r, r.u16(), depth);
    case 0xdf:
      return readMap(r, r.u32(), depth);
  }
  throw new UnsupportedValue(`not valid MessagePack: byte 0x${b.toString(16)}`);
}

function readArray(r: Reader, n: number, depth: number): unknown[] {
  if (depth >= MAX_DEPTH) throw new UnsupportedValue(`nested deeper than ${MAX_DEPTH}`);
  if (n > r.buf.length - r.pos) throw new UnsupportedValue("not valid MessagePack: truncated");
  const out = new Array(n);
  for (let i = 0; i < n; i++) out[i] = readValue(r, depth + 1);
  return out;
}

function readMap(r: Reader, n: number, depth: number): Record<string, unknown> {
  if (depth >= MAX_DEPTH) throw new UnsupportedValue(`nested deeper than ${MAX_DEPTH}`);
  if (n > r.buf.length - r.pos) throw new UnsupportedValue("not valid MessagePack: truncated");
  const out: Record<string, unknown> = {};
  for (let i = 0; i < n; i++) {
    const key = readValue(r, depth + 1);
    if (typeof key !== "string") throw new UnsupportedValue(`map key ${String(key)} is not a string`);
    const value = readValue(r, depth + 1);
    // "__proto__" is an ordinary key here, never the prototype.
    Object.defineProperty(out, key, { value, enumerable: true, writable: true, configurable: true });
  }
  return out;
}

function readExt(r: Reader, n: number, depth: number): unknown {
  const code = (r.u8() << 24) >> 24; // signed
  return extValue(code, r.take(n), depth);
}

function extValue(code: number, data: Uint8Array, depth: number): unknown {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  switch (code) {
    case EXT_BIGINT: {
      if (data.length === 0) throw new UnsupportedValue("empty big int extension");
      let v = 0n;
      for (const x of data) v = (v << 8n) | BigInt(x);
      v = BigInt.asIntN(data.length * 8, v);
      return v >= INT64_MIN && v <= UINT64_MAX ? intValue(v) : v;
    }
    case EXT_DATETIME: {
      const n = data.length;
      const flag = n ? data[0] : -1;
      if (flag === 0 && n === 9) return new DateTime(view.getBigInt64(1), "naive");
      if ((flag === 1 || flag === 2) && n >= 13 && (flag === 2) === n > 13) {
        const zone = flag === 2 ? str(data.subarray(13)) : "";
        return new DateTime(view.getBigInt64(1), flag === 1 ? "offset" : "zone", view.getInt32(9), zone);
      }
      throw new UnsupportedValue("malformed datetime extension");
    }
    case EXT_UUID:
      if (data.length !== 16) throw new UnsupportedValue("UUID extension must hold 16 bytes");
      return new Uuid(data);
    case EXT_DECIMAL: {
      let text: string;
      try {
        text = new TextDecoder("ascii", { fatal: true }).decode(data);
      } catch {
        throw new UnsupportedValue("malformed decimal extension");
      }
      if (!/^[\x20-\x7e]*$/.test(text)) throw new UnsupportedValue("malformed decimal extension");
      return new Decimal(text);
    }
    case EXT_SET: {
      if (depth >= MAX_DEPTH) throw new UnsupportedValue(`nested deeper than ${MAX_DEPTH}`);
      const inner = new Reader(data);
      const items = readValue(inner, depth + 1);
      if (!Array.isArray(items) || inner.pos !== data.length) throw new UnsupportedValue("set extension must hold an array");
      return new Set(items);
    }
    case EXT_OPAQUE: {
      if (data.length === 0 || data[0] === 0 || data.length < 1 + data[0]) {
        throw new UnsupportedValue("malformed opaque extension");
      }
      return new Opaque(str(data.subarray(1, 1 + data[0])), data.slice(1 + data[0]));
    }
    case -1: {
      // MessagePack timestamp: accepted on input, read as a UTC datetime.
      let secs: bigint;
      let nanos = 0;
      if (data.length === 4) secs = BigInt(view.getUint32(0));
      else if (data.length === 8) {
        const hi = view.getUint32(0);
        nanos = hi >>> 2;
        secs = (BigInt(hi & 3) << 32n) | BigInt(view.getUint32(4));
      } else if (data.length === 12) {
        nanos = view.getUint32(0);
        secs = view.getBigInt64(4);
      } else throw new UnsupportedValue("malformed timestamp extension");
      return new DateTime(secs * 1000000n + BigInt(Math.floor(nanos / 1000)), "offset", 0);
    }
  }
  throw new UnsupportedValue(`unknown extension type ${code}`);
}

/** The JavaScript value of an encoding (throws UnsupportedValue on malformed input). */
export function decode(data: Uint8Array): unknown {
  // A Buffer's slice() is a view; decode over a plain Uint8Array so bytes come back as copies.
  if (Object.getPrototypeOf(data) !== Uint8Array.prototype) data = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const r = new Reader(data);
  const v = readValue(r, 0);
  if (r.pos !== data.length) throw new UnsupportedValue("not valid MessagePack: trailing bytes");
  return v;
}

/** The canonical encoding of any valid encoding. */
export function canonicalize(data: Uint8Array): Uint8Array {
  return encode(decode(data));
}
