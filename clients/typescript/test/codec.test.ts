import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { decode as msgpackDecode, ExtensionCodec } from "@msgpack/msgpack";
import {
  bytesToHex,
  canonicalDecimal,
  canonicalize,
  DateTime,
  Decimal,
  decode,
  encode,
  Float,
  hexToBytes,
  Opaque,
  UnsupportedValue,
  Uuid,
} from "../src/codec.js";
import { REPO } from "./sidecar.js";

interface GoldenValue {
  name: string;
  value: unknown[];
  encoding?: string;
  encoding_length?: number;
}
const golden = JSON.parse(readFileSync(join(REPO, "tests/golden/values.json"), "utf8")) as {
  values: GoldenValue[];
  canonicalize: { name: string; input: string; canonical?: string; error?: unknown }[];
};

const hex = (b: Uint8Array) => bytesToHex(b);
const enc = (v: unknown) => hex(encode(v));

describe("golden vectors (tests/golden/values.json, made by the Python reference)", () => {
  const small = golden.values.filter((v) => v.encoding !== undefined);
  it.each(small.map((v) => [v.name, v] as const))("%s: decode then encode gives the same bytes", (_n, v) => {
    expect(hex(encode(decode(hexToBytes(v.encoding!))))).toBe(v.encoding);
  });

  it("large values (golden vectors give only their length) encode to that length and round-trip", () => {
    const large = golden.values.filter((v) => v.encoding === undefined);
    expect(large.length).toBeGreaterThan(3);
    for (const v of large) {
      const [kind, a, b, c] = v.value as [string, unknown, unknown, unknown];
      let js: unknown;
      if (kind === "strx") js = (a as string).repeat(b as number);
      else if (kind === "bytesx") js = new Uint8Array(b as number).fill(hexToBytes(a as string)[0]);
      else if (kind === "listx") js = new Array(b as number).fill(null);
      else if (kind === "opaquex") js = new Opaque(a as string, new Uint8Array(c as number).fill(hexToBytes(b as string)[0]));
      else throw new Error(`unknown description ${kind}`);
      const bytes = encode(js);
      expect(bytes.length, v.name).toBe(v.encoding_length);
      expect(hex(encode(decode(bytes))), v.name).toBe(hex(bytes));
    }
  });

  const canon = golden.canonicalize.filter((c) => c.canonical !== undefined);
  it.each(canon.map((c) => [c.name, c] as const))("canonicalize %s", (_n, c) => {
    expect(hex(canonicalize(hexToBytes(c.input)))).toBe(c.canonical);
  });

  it("every golden encoding is plain MessagePack to an independent decoder (@msgpack/msgpack)", () => {
    const codec = new ExtensionCodec();
    for (const t of [1, 2, 3, 4, 5, 6]) codec.register({ type: t, encode: () => null, decode: (d) => ({ ext: t, d }) });
    for (const v of small) msgpackDecode(hexToBytes(v.encoding!), { extensionCodec: codec, useBigInt64: true });
  });

  it("simple descriptions encode like Python", () => {
    let checked = 0;
    for (const v of small) {
      const [kind, a] = v.value as [string, unknown];
      let js: unknown;
      if (kind === "none") js = null;
      else if (kind === "bool") js = a;
      else if (kind === "int") js = BigInt(a as string);
      else if (kind === "str") js = a;
      else if (kind === "bytes") js = hexToBytes(a as string);
      else if (kind === "uuid") js = Uuid.parse(a as string);
      else if (kind === "decimal") js = new Decimal(a as string);
      else if (kind === "float") {
        const f = a === "inf" ? Infinity : a === "-inf" ? -Infinity : a === "nan" ? NaN : Number(a);
        js = new Float(f);
      } else continue;
      expect(enc(js), v.name).toBe(v.encoding);
      checked++;
    }
    expect(checked).toBeGreaterThan(40);
  });

  it("datetimes described as ISO text (with offset or zone) encode like Python", () => {
    let checked = 0;
    for (const v of small) {
      const [kind, iso, extra] = v.value as [string, string, { zone?: string; fold?: number; offset_us?: number } | undefined];
      if (kind !== "datetime" || extra?.fold !== undefined || extra?.offset_us !== undefined) continue;
      const text = extra?.zone ? `${iso}[${extra.zone}]` : iso;
      expect(enc(DateTime.parse(text)), v.name).toBe(v.encoding);
      checked++;
    }
    expect(checked).toBeGreaterThan(10);
  });
});

describe("JavaScript representations", () => {
  it("numbers: safe integers are ints, others float64; bigint is an int; Float forces a float", () => {
    expect(enc(1)).toBe("01");
    expect(enc(-33)).toBe("d0df");
    expect(enc(1.5)).toBe("cb3ff8000000000000");
    expect(enc(new Float(1))).toBe("cb3ff0000000000000");
    expect(enc(-0)).toBe("cb8000000000000000");
    expect(enc(2 ** 53)).toBe("cb4340000000000000"); // not a safe integer: stays a float
    expect(enc(2n ** 53n)).toBe("cf0020000000000000");
    expect(enc(2n ** 64n - 1n)).toBe("cfffffffffffffffff");
    expect(enc(2n ** 64n)).toBe("c70901010000000000000000");
    expect(enc(NaN)).toBe("cb7ff8000000000000");
  });

  it("ints read back as numbers when safe, else bigint; integral floats as Float", () => {
    expect(decode(hexToBytes("cf0020000000000000"))).toBe(2n ** 53n);
    expect(decode(hexToBytes("ce80000000"))).toBe(2 ** 31);
    expect(decode(hexToBytes("cb3ff0000000000000"))).toEqual(new Float(1));
    expect(decode(hexToBytes("cb3ff8000000000000"))).toBe(1.5);
    expect(decode(hexToBytes("c70901010000000000000000"))).toBe(2n ** 64n);
  });

  it("map keys sort by UTF-8 bytes, not UTF-16 code units", () => {
    // U+FF61 (UTF-8 ef bd a1) sorts before U+1F600 (f0 9f 98 80) in bytes, after it in UTF-16.
    const bytes = encode({ "\u{1F600}": 1, "\uFF61": 2, a: 3 });
    expect(Object.keys(decode(bytes) as object)).toEqual(["a", "\uFF61", "\u{1F600}"]);
    expect(hex(bytes)).toBe("83a16103a3efbda102a4f09f988001");
  });

  it("refuses what the sidecar cannot store, naming the path", () => {
    const bad = (v: unknown, path: string) => {
      try {
        encode(v);
      } catch (e) {
        expect(e).toBeInstanceOf(UnsupportedValue);
        expect((e as UnsupportedValue).path).toBe(path);
        return;
      }
      throw new Error("no error");
    };
    bad({ a: [1, () => 1] }, "$['a'][1]");
    bad({ s: "\uD800" }, "$['s']");
    bad(Symbol("x"), "$");
    bad(new (class Foo {})(), "$");
    let deep: unknown = 1;
    for (let i = 0; i < 65; i++) deep = [deep];
    expect(() => encode(deep)).toThrow(/nested deeper than 64/);
    expect(() => new Opaque("", new Uint8Array()) && encode(new Opaque("", new Uint8Array()))).toThrow(/1 to 255/);
  });

  it("Date encodes as a UTC datetime (ms precision); DateTime keeps microseconds, offsets and zones", () => {
    const d = new Date("2024-05-01T12:00:00.123Z");
    const dt = decode(encode(d)) as DateTime;
    expect(dt).toBeInstanceOf(DateTime);
    expect(dt.kind).toBe("offset");
    expect(dt.toDate().getTime()).toBe(d.getTime());
    expect(dt.toString()).toBe("2024-05-01T12:00:00.123000+00:00");
    const z = DateTime.parse("2024-07-14T10:00:00[Europe/Paris]");
    expect(z.offsetSeconds).toBe(7200);
    expect(z.toString()).toBe("2024-07-14T10:00:00+02:00[Europe/Paris]");
    expect(DateTime.parse("0001-01-01T00:00:00").toString()).toBe("0001-01-01T00:00:00");
    expect(DateTime.parse("1969-12-31T23:59:59.000001").micros).toBe(-999999n);
    expect(() => DateTime.parse("2023-02-29T00:00:00")).toThrow(UnsupportedValue);
  });

  it("decimals are canonicalised like Python's str(Decimal(x))", () => {
    const cases: [string, string][] = [
      ["1.10", "1.10"], ["1.1e0", "1.1"], ["1E+3", "1E+3"], ["1000", "1000"], ["0.000001", "0.000001"],
      ["0.0000001", "1E-7"], ["-0", "-0"], ["0E-7", "0E-7"], ["0.0000000", "0E-7"], ["123.456e-2", "1.23456"],
      ["1e-30", "1E-30"], ["nan", "NaN"], ["-Inf", "-Infinity"], ["sNaN0012", "sNaN12"], [" 42 ", "42"],
      ["00012.50", "12.50"], ["1.5E+10", "1.5E+10"], [".5", "0.5"], ["5.", "5"],
    ];
    for (const [input, want] of cases) expect(canonicalDecimal(input), input).toBe(want);
    expect(() => canonicalDecimal("1.2.3")).toThrow(UnsupportedValue);
  });

  it("sets are sorted and deduplicated by encoding; maps keep __proto__ as a key", () => {
    expect(enc(new Set([3, 1, 2, 1]))).toBe("d60593010203");
    expect(enc(new Set([[1], [1]]))).toBe("d4059191".slice(0, 0) + enc(new Set([[1]])));
    const obj = decode(hexToBytes("81a95f5f70726f746f5f5f01")) as Record<string, unknown>;
    expect(Object.getPrototypeOf(obj)).toBe(Object.prototype);
    expect(Object.keys(obj)).toEqual(["__proto__"]);
    expect(enc(obj)).toBe("81a95f5f70726f746f5f5f01");
  });

  it("UUID, opaque and bytes round-trip", () => {
    const u = Uuid.parse("12345678-1234-5678-1234-567812345678");
    expect(enc(u)).toBe("d80312345678123456781234567812345678");
    expect(String(decode(encode(u)))).toBe("12345678-1234-5678-1234-567812345678");
    const o = decode(encode(new Opaque("pickle", Uint8Array.of(0x80, 4)))) as Opaque;
    expect([o.type, hex(o.data)]).toEqual(["pickle", "8004"]);
    expect(decode(encode(Uint8Array.of(1, 2)))).toEqual(Uint8Array.of(1, 2));
  });

  it("rejects malformed input", () => {
    for (const h of ["c1", "92 01", "c70006", "d5060174ff".slice(0, 6), "81 01 01", "d40700"]) {
      expect(() => decode(hexToBytes(h.replace(/ /g, ""))), h).toThrow(UnsupportedValue);
    }
  });
});
