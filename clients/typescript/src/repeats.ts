import { Failed } from "./errors.js";

const SHOWN_CHARS = 80;

function shown(text: string): string {
  return `'${text.slice(0, SHOWN_CHARS)}'`;
}

/**
 * No ID or sequence integer handed out twice by one client, whatever a server or a proxy on the way sends (the
 * rules and their memory bounds: docs/clients.md). Every answer (a batch whole, a stream chunk by chunk) is
 * checked before any of it is handed out; one that breaks a rule fails its server (moved on from), and nothing of
 * it is remembered:
 *
 * - within one answer, nothing twice;
 * - within one answer in a form GET /v1/schemes declares rising (`rising`), each ID above the one before as a
 *   string, across a stream's chunks too;
 * - across answers, no answer may hold the first or last ID of one of the last ANSWERS_REMEMBERED answers (or
 *   stream chunks) of the same scheme, form and options;
 * - per issuing identity, rising across answers, in the forms `/v1/schemes` lists in `rising_per_identity`: each ID
 *   read as an integer, its identity taken from its bits. One identity's generator never goes back (a successor
 *   starts above the recorded high-water mark), so an ID inside the span (lowest to highest) of one of its
 *   identity's last SPANS_PER_IDENTITY answers, or at or below the floor the forgotten spans leave, is refused (a
 *   gap between spans passes: a concurrent answer arriving late). IDENTITIES_REMEMBERED identities per scheme, the
 *   least recently seen forgotten first;
 * - other forms: at least the last RECENT_IDS IDs per scheme, form and options (up to twice as many: two
 *   generations of sets, the older dropped whole);
 * - sequence integers: every `next` integer and `range` handed out, as merged intervals, at most
 *   INTERVALS_REMEMBERED per sequence, the lowest forgotten first.
 */

export const ANSWERS_REMEMBERED = 1024;
export const SPANS_PER_IDENTITY = 64;
export const IDENTITIES_REMEMBERED = 4096;
export const RECENT_IDS = 1 << 16;
export const INTERVALS_REMEMBERED = 4096;

const STRIP = -2;
const CHUNK_SCALE = 2 ** 40;

/** How one form's text reads as an integer and which bits name its issuer (a `rising_per_identity` entry). */
export class IdentityOrder {
  private readonly table = new Int16Array(128).fill(-1);
  private readonly radix: number;

  private constructor(
    readonly digits: string,
    strip: string,
    readonly mask: bigint,
    readonly fields: string,
  ) {
    this.radix = digits.length;
    for (const c of strip) if (c.charCodeAt(0) < 128) this.table[c.charCodeAt(0)] = STRIP;
    for (let i = 0; i < digits.length; i++) this.table[digits.charCodeAt(i)] = i;
  }

  /** The entry, or null when it is not one this client can read (then the form has the recent-ID rule). */
  static from(data: unknown): IdentityOrder | null {
    if (!data || typeof data !== "object") return null;
    const { digits, strip = "", identity } = data as { digits?: unknown; strip?: unknown; identity?: unknown };
    if (typeof digits !== "string" || digits.length < 2 || digits.length > 36 || new Set(digits).size !== digits.length)
      return null;
    if ([...digits].some((c) => c.charCodeAt(0) >= 128)) return null;
    if (typeof strip !== "string" || !Array.isArray(identity) || identity.length === 0) return null;
    let mask = 0n;
    const names: string[] = [];
    for (const piece of identity) {
      const { shift, bits, field } = (piece ?? {}) as { shift?: unknown; bits?: unknown; field?: unknown };
      if (!Number.isInteger(shift) || !Number.isInteger(bits) || (shift as number) < 0) return null;
      if ((bits as number) <= 0 || (bits as number) > 256) return null;
      mask |= ((1n << BigInt(bits as number)) - 1n) << BigInt(shift as number);
      const name = String(field ?? "identity");
      if (!names.includes(name)) names.push(name);
    }
    return new IdentityOrder(digits, strip, mask, names.join("/"));
  }

  /** The integer `text` holds; null when a character is not one of the digits. */
  integer(text: string): bigint | null {
    const { table, radix } = this;
    let value = 0n;
    let chunk = 0;
    let scale = 1;
    let digits = 0;
    for (let i = 0; i < text.length; i++) {
      const code = text.charCodeAt(i);
      const digit = code < 128 ? (table[code] as number) : -1;
      if (digit === STRIP) continue;
      if (digit < 0) return null;
      chunk = chunk * radix + digit;
      scale *= radix;
      digits++;
      if (scale >= CHUNK_SCALE) {
        value = value * BigInt(scale) + BigInt(chunk);
        chunk = 0;
        scale = 1;
      }
    }
    if (digits === 0) return null;
    return scale > 1 ? value * BigInt(scale) + BigInt(chunk) : value;
  }
}

/** What an answer is checked for: `rising` within it as strings, `order` per issuing identity across answers. */
export interface Rule {
  scheme: string;
  rising: boolean;
  order: IdentityOrder | null;
}

/** Index of the first element of sorted `list` at or above `value`. */
function lowerBound(list: bigint[], value: bigint): number {
  let low = 0;
  let high = list.length;
  while (low < high) {
    const mid = (low + high) >> 1;
    if ((list[mid] as bigint) < value) low = mid + 1;
    else high = mid;
  }
  return low;
}

/** Index of the first element of sorted `list` above `value`. */
function upperBound(list: bigint[], value: bigint): number {
  let low = 0;
  let high = list.length;
  while (low < high) {
    const mid = (low + high) >> 1;
    if ((list[mid] as bigint) <= value) low = mid + 1;
    else high = mid;
  }
  return low;
}

/** Disjoint `[low, high]` intervals; `join`: also merge intervals that touch (integers), else only overlapping. */
class Intervals {
  floor = -1n;
  readonly lows: bigint[] = [];
  readonly highs: bigint[] = [];

  constructor(
    private readonly limit: number,
    private readonly join: boolean,
    private readonly floorOnForget: boolean,
  ) {}

  /** The first interval holding a value of `low..high` (or [floor, floor] when `low` is at or below it). */
  overlap(low: bigint, high: bigint): [bigint, bigint] | null {
    if (this.floorOnForget && low <= this.floor) return [-1n, this.floor];
    const last = this.highs[this.highs.length - 1];
    if (last === undefined || low > last) return null;
    const at = lowerBound(this.highs, low);
    const found = this.lows[at];
    return found !== undefined && found <= high ? [found, this.highs[at] as bigint] : null;
  }

  add(from: bigint, to: bigint): void {
    const gap = this.join ? 1n : 0n;
    const start = lowerBound(this.highs, from - gap);
    const end = upperBound(this.lows, to + gap);
    let low = from;
    let high = to;
    if (start < end) {
      const first = this.lows[start] as bigint;
      const last = this.highs[end - 1] as bigint;
      if (first < low) low = first;
      if (last > high) high = last;
    }
    this.lows.splice(start, end - start, low);
    this.highs.splice(start, end - start, high);
    if (this.lows.length > this.limit) {
      if (this.floorOnForget) this.floor = this.highs[0] as bigint;
      this.lows.shift();
      this.highs.shift();
    }
  }
}

/** The last `limit` values at least (up to 2 * limit): two generations of sets, the older dropped whole. */
class Recent {
  private newer = new Set<string>();
  private older = new Set<string>();

  constructor(private readonly limit: number) {}

  has(item: string): boolean {
    return this.newer.has(item) || this.older.has(item);
  }

  add(items: readonly string[]): void {
    for (const item of items) this.newer.add(item);
    if (this.newer.size >= this.limit) {
      this.older = this.newer;
      this.newer = new Set();
    }
  }
}

export class Repeats {
  private readonly ends = new Map<string, Set<string>>();
  private readonly identities = new Map<string, Map<bigint, Intervals>>();
  private readonly recent = new Map<string, Recent>();
  private readonly sequences = new Map<string, Intervals>();

  /**
   * Throws Failed when `items` break a rule for `key` (`rising`: a Rule, or true for strings that rise within the
   * answer, the first above `after`: the last line of the same stream's previous chunk); else remembers them.
   */
  check(
    key: string,
    items: readonly string[],
    what = "ID",
    first = 1,
    rising: boolean | Rule = false,
    after?: string,
  ): void {
    if (items.length === 0) return;
    const rule = typeof rising === "object" ? rising : null;
    const index = new Map<string, number>();
    for (let i = 0; i < items.length; i++) {
      const item = items[i] as string;
      const at = index.get(item);
      if (at !== undefined) {
        throw new Failed(
          `answer holds ${shown(item)} twice (${what}s ${at + first} and ${i + first}): an ID is never issued twice`,
        );
      }
      index.set(item, i);
    }
    let ends = this.ends.get(key);
    if (!ends) {
      ends = new Set();
      this.ends.set(key, ends);
    }
    for (const end of ends) {
      const i = index.get(end);
      if (i !== undefined) {
        throw new Failed(`${what} ${i + first} is ${shown(end)}, received before: a replayed or repeating answer`);
      }
    }
    if (rule ? rule.rising : rising) checkRising(items, after, what, first);
    if (rule?.order) {
      this.checkIdentities(rule.scheme, rule.order, items, what, first)();
    } else {
      let recent = this.recent.get(key);
      if (!recent) {
        recent = new Recent(RECENT_IDS);
        this.recent.set(key, recent);
      }
      for (let i = 0; i < items.length; i++) {
        if (recent.has(items[i] as string)) {
          throw new Failed(
            `${what} ${i + first} is ${shown(items[i] as string)}, received before: a replayed or repeating answer`,
          );
        }
      }
      recent.add(items);
    }
    ends.add(items[0] as string);
    ends.add(items[items.length - 1] as string);
    while (ends.size > 2 * ANSWERS_REMEMBERED) ends.delete(ends.values().next().value as string);
  }

  /** Throws Failed when an item is inside a span of its identity received before; else returns what remembers. */
  private checkIdentities(
    scheme: string,
    order: IdentityOrder,
    items: readonly string[],
    what: string,
    first: number,
  ): () => void {
    let known = this.identities.get(scheme);
    if (!known) {
      known = new Map();
      this.identities.set(scheme, known);
    }
    const seen = new Map<bigint, [bigint, bigint]>();
    for (let i = 0; i < items.length; i++) {
      const item = items[i] as string;
      const value = order.integer(item);
      if (value === null)
        throw new Failed(`${what} ${i + first} is ${shown(item)}, not an integer in '${order.digits}'`);
      const identity = value & order.mask;
      if (known.get(identity)?.overlap(value, value)) {
        throw new Failed(
          `${what} ${i + first} is ${shown(item)}, not above an ID of its issuer (${order.fields} bits 0x${identity.toString(16)}) received before: a replayed or spliced answer`,
        );
      }
      const span = seen.get(identity);
      if (!span) seen.set(identity, [value, value]);
      else if (value < span[0]) span[0] = value;
      else if (value > span[1]) span[1] = value;
    }
    const identities = known;
    return () => {
      for (const [identity, [low, high]] of seen) {
        const spans = identities.get(identity) ?? new Intervals(SPANS_PER_IDENTITY, false, true);
        identities.delete(identity); // most recently seen last
        identities.set(identity, spans);
        spans.add(low, high);
      }
      while (identities.size > IDENTITIES_REMEMBERED) identities.delete(identities.keys().next().value as bigint);
    };
  }

  /** Throws Failed when an integer of a `next` answer of sequence `name` was handed out before; else remembers. */
  checkNext(name: string, values: bigint[]): void {
    let held = this.sequences.get(name);
    if (!held) {
      held = new Intervals(INTERVALS_REMEMBERED, true, false);
      this.sequences.set(name, held);
    }
    values.forEach((value, i) => {
      const found = held?.overlap(value, value);
      if (found) {
        throw new Failed(
          `integer ${i + 1} is ${value}, inside ${found[0]}..${found[1]} received before: a replayed, spliced or repeating answer`,
        );
      }
    });
    let low: bigint | undefined;
    let high = 0n;
    for (const value of values) {
      if (low !== undefined && value === high + 1n) {
        high = value;
        continue;
      }
      if (low !== undefined) held.add(low, high);
      low = value;
      high = value;
    }
    if (low !== undefined) held.add(low, high);
  }

  /** Throws Failed when `first..last` holds an integer of sequence `name` handed out before; else remembers it. */
  checkRange(name: string, first: bigint, last: bigint): void {
    let held = this.sequences.get(name);
    if (!held) {
      held = new Intervals(INTERVALS_REMEMBERED, true, false);
      this.sequences.set(name, held);
    }
    const found = held.overlap(first, last);
    if (found) {
      throw new Failed(
        `range ${first}..${last} overlaps ${found[0]}..${found[1]}, received before: a replayed, spliced or repeating answer`,
      );
    }
    held.add(first, last);
  }
}

/** Throws Failed unless `items` strictly rise as strings (byte order: IDs are ASCII), the first above `after`. */
export function checkRising(items: readonly string[], after: string | undefined, what = "ID", first = 1): void {
  let previous = after;
  items.forEach((item, i) => {
    if (previous !== undefined && !(previous < item)) {
      throw new Failed(
        `${what} ${i + first} is ${shown(item)}, not above ${shown(previous)}: one answer of this form rises, so this one was spliced or replayed`,
      );
    }
    previous = item;
  });
}
