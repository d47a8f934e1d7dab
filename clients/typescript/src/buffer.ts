/**
 * The `newId` buffer of one (scheme, options, format): bookkeeping only, no I/O (the same rules as the Python and
 * Go clients). IDs arrive in batches; a batch may be handed out until `maxAgeMs` after its request started. Each
 * batch is cut into SEGMENTS_PER_BATCH segments; the hot path reads the head segment only, and every segment change
 * is a chance to ask for a refill (in the background) when fewer IDs than the low-water mark remain. The refill
 * size follows the rate of use: about maxAge/2 of use (at most 1 s), within [minRefill, maxRefill] and the server's
 * max count; IDs expiring unused halve the rate estimate, a draw finding the buffer empty doubles it.
 */

const SEGMENTS_PER_BATCH = 4;
const RATE_WINDOW_MS = 50;
const RATE_EWMA = 0.5;
const EXPIRED_RATE_CUT = 0.5;
const MISSED_RATE_BOOST = 2;
const RATE_MAX_PER_S = 1e9;
const MAX_HORIZON_S = 1;
const LATENCY_MARGIN = 3;

export interface Segment {
  /** performance.now() milliseconds; Infinity: never expires. */
  deadline: number;
  ids: string[];
  pos: number;
}

export class IdBuffer {
  head: Segment | null = null;
  queue: Segment[] = [];
  queued = 0;
  /** The refill under way (it never rejects: its error is kept in lastError). */
  refill: Promise<void> | null = null;
  generation = 0;
  lastError: unknown = null;
  private readonly horizon: number;
  private rate = 0;
  private windowStart = performance.now();
  private windowDrawn = 0;
  private latency = 0;
  private refills = 0;
  private boostedAt = -1;

  constructor(
    readonly scheme: string,
    readonly issue: { format?: string; options?: Record<string, string> },
    private readonly minRefill: number,
    private readonly maxRefill: number,
    private readonly maxAgeMs: number | null,
  ) {
    this.horizon = maxAgeMs === null ? MAX_HORIZON_S : Math.min(maxAgeMs / 2000, MAX_HORIZON_S);
  }

  refillSize(cap: number): number {
    const size = Math.max(this.minRefill, Math.min(this.maxRefill, Math.ceil(this.rate * this.horizon)));
    return cap > 0 ? Math.max(1, Math.min(size, cap)) : size;
  }

  lowWater(cap: number): number {
    const half = Math.floor(this.refillSize(cap) / 2);
    return Math.max(
      half,
      Math.min(Math.ceil(this.rate * this.latency * LATENCY_MARGIN), Math.ceil(this.rate * this.horizon)),
    );
  }

  wantsRefill(cap: number): boolean {
    return this.refill === null && this.queued < this.lowWater(cap);
  }

  noteDrawn(count: number, now: number): void {
    this.windowDrawn += count;
    const elapsed = now - this.windowStart;
    if (elapsed >= RATE_WINDOW_MS) {
      const rate = (this.windowDrawn * 1000) / elapsed;
      this.rate = this.rate === 0 ? rate : RATE_EWMA * rate + (1 - RATE_EWMA) * this.rate;
      this.windowStart = now;
      this.windowDrawn = 0;
    }
  }

  /** Queue a fetched batch; `started`: performance.now() when its request began; `latency` in seconds. */
  add(ids: string[], started: number, latency: number): void {
    this.refills++;
    this.latency = this.latency === 0 ? latency : 0.5 * latency + 0.5 * this.latency;
    const deadline = this.maxAgeMs === null ? Number.POSITIVE_INFINITY : started + this.maxAgeMs;
    const step = Math.max(1, Math.ceil(ids.length / SEGMENTS_PER_BATCH));
    for (let i = 0; i < ids.length; i += step) {
      const part = ids.slice(i, i + step);
      this.queue.push({ deadline, ids: part, pos: 0 });
      this.queued += part.length;
    }
  }

  retire(now: number): void {
    const head = this.head;
    if (head === null) return;
    this.head = null;
    this.noteDrawn(head.pos, now);
    if (head.pos < head.ids.length) this.rate *= EXPIRED_RATE_CUT;
  }

  nextSegment(now: number): boolean {
    while (this.queue.length > 0) {
      const segment = this.queue.shift() as Segment;
      this.queued -= segment.ids.length;
      if (now < segment.deadline) {
        this.head = segment;
        return true;
      }
      this.rate *= EXPIRED_RATE_CUT;
    }
    return false;
  }

  noteMiss(): void {
    if (this.refills > 0 && this.boostedAt !== this.generation) {
      this.boostedAt = this.generation;
      const boosted = this.rate > 0 ? this.rate * MISSED_RATE_BOOST : this.minRefill / Math.max(this.latency, 1e-3);
      this.rate = Math.min(boosted, RATE_MAX_PER_S);
    }
  }

  end(error: unknown): void {
    this.refill = null;
    this.generation++;
    this.lastError = error;
  }

  clear(): void {
    this.head = null;
    this.queue = [];
    this.queued = 0;
  }
}
