/**
 * Time-ordered identifiers (UUIDv7 strings), strictly increasing within a process.
 *
 * Checkpoint ids order a thread's history (the newest checkpoint has the greatest id). The
 * client fills them in, which makes every put idempotent by id (a retry needs no request_id),
 * the same scheme as the Python client and the server: a 48-bit millisecond clock, a 12-bit
 * counter seeded randomly each millisecond, then 62 random bits.
 */
import { randomBytes } from "node:crypto";

let lastMs = 0;
let seq = 0;

export function newId(): string {
  let ms = Date.now();
  if (ms <= lastMs) {
    seq += 1;
    if (seq >= 1 << 12) {
      lastMs += 1; // counter exhausted: borrow the next millisecond
      seq = 0;
    }
    ms = lastMs;
  } else {
    lastMs = ms;
    seq = randomBytes(1)[0];
  }
  const rand = randomBytes(8);
  rand[0] = (rand[0] & 0x3f) | 0x80; // variant 10
  const hex =
    ms.toString(16).padStart(12, "0") +
    (0x7000 | seq).toString(16).padStart(4, "0") +
    rand.toString("hex");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}
