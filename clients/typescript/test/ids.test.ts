import { describe, expect, it } from "vitest";
import { newId } from "../src/ids.js";

describe("newId", () => {
  it("makes UUIDv7 strings that strictly increase", () => {
    const ids = Array.from({ length: 20000 }, () => newId());
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    for (let i = 1; i < ids.length; i++) expect(ids[i] > ids[i - 1]).toBe(true);
  });

  it("starts with the millisecond clock", () => {
    const before = Date.now();
    const ms = parseInt(newId().replace(/-/g, "").slice(0, 12), 16);
    expect(ms).toBeGreaterThanOrEqual(before);
    expect(ms).toBeLessThan(before + 60_000);
  });
});
