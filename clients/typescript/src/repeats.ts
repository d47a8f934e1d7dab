import { Failed } from "./errors.js";
import { shown } from "./shapes.js";

/**
 * No ID or sequence integer handed out twice, whatever a server or a proxy on the way sends. Three rules, checked
 * before any of an answer is handed out; an answer that breaks one fails its server (moved on from):
 *
 * - within one answer, nothing twice (a batch whole, a stream chunk by chunk; a `next` answer must rise);
 * - within one answer in a form GET /v1/schemes declares rising (`rising`: the form, and the options it needs),
 *   each ID above the one before, across a stream's chunks too: a proxy keeping an old answer's middle IDs
 *   between fresh ends breaks the order;
 * - across answers, no answer may hold the first or last ID of one of the last ANSWERS_REMEMBERED answers (or
 *   stream chunks) of the same scheme, form and options: a cache replaying a batch or a proxy splicing an old
 *   answer into a new one repeats those. A `range` answer may not overlap a range received before.
 *
 * The order is checked within one answer only (one server request: one generator), never across answers: one URL
 * often reaches several generators (a load balancer in front of replicas, `idmint serve --workers N`), whose IDs
 * do not rise among themselves.
 */

export const ANSWERS_REMEMBERED = 1024;

export class Repeats {
  private readonly ends = new Map<string, Set<string>>();
  private readonly ranges = new Map<string, [bigint, bigint][]>();

  /**
   * Throws Failed when `items` hold one twice, an end of an earlier answer for `key` or, when `rising`, do not
   * strictly rise (the first above `after`: the last line of the same stream's previous chunk); else remembers
   * their ends.
   */
  check(key: string, items: readonly string[], what = "ID", first = 1, rising = false, after?: string): void {
    if (items.length === 0) return;
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
    if (rising) checkRising(items, after, what, first);
    ends.add(items[0] as string);
    ends.add(items[items.length - 1] as string);
    while (ends.size > 2 * ANSWERS_REMEMBERED) ends.delete(ends.values().next().value as string);
  }

  checkNext(name: string, values: bigint[]): void {
    const last = values[values.length - 1];
    const first = values[0];
    if (first === undefined || last === undefined) return;
    for (const [low, high] of this.ranges.get(name) ?? []) {
      if (low <= last && first <= high) {
        const at = values.findIndex((v) => v >= low);
        if (at >= 0 && (values[at] as bigint) <= high) {
          throw new Failed(
            `integer ${at + 1} is ${values[at]}, inside the range ${low}..${high} received before: a replayed or repeating answer`,
          );
        }
      }
    }
    this.check(
      `sequence:${name}`,
      values.map((v) => v.toString()),
      "integer",
    );
  }

  checkRange(name: string, first: bigint, last: bigint): void {
    const ranges = this.ranges.get(name) ?? [];
    for (const [low, high] of ranges) {
      if (first <= high && low <= last) {
        throw new Failed(
          `range ${first}..${last} overlaps ${low}..${high}, received before: a replayed or repeating answer`,
        );
      }
    }
    for (const end of this.ends.get(`sequence:${name}`) ?? []) {
      const value = BigInt(end);
      if (first <= value && value <= last) {
        throw new Failed(`range ${first}..${last} holds ${value}, received before: a replayed or repeating answer`);
      }
    }
    ranges.push([first, last]);
    if (ranges.length > ANSWERS_REMEMBERED) ranges.shift();
    this.ranges.set(name, ranges);
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
