import { IdBuffer } from "./buffer.js";
import {
  CallAbortedError,
  ClientClosedError,
  Failed,
  IdmintClientError,
  NoReplicaAvailableError,
  Refused,
  UnknownPublicIdError,
  UnknownSchemeError,
} from "./errors.js";
import { FleetCheck, parseFleet } from "./fleet.js";
import type {
  CallOptions,
  Candidates,
  Decoded,
  IssueOptions,
  PublicNextOptions,
  Revealed,
  SchemeInfo,
  SequenceRange,
  Unrevealed,
} from "./models.js";
import { Repeats } from "./repeats.js";
import {
  ALL_SCOPES,
  MAX_ANSWER_BYTES,
  ReplicaSet,
  SEQUENCE_SCOPE,
  check,
  countRange,
  normaliseUrls,
  readText,
  tooLong,
} from "./replicas.js";
import { IdShape } from "./shapes.js";

export const DEFAULT_TIMEOUT_MS = 10_000;
export const DEFAULT_MAX_AGE_MS = 1_000;
export const DEFAULT_MIN_REFILL = 64;
export const DEFAULT_MAX_REFILL = 100_000;
/** The largest integer a sequence issues (signed 64-bit). */
export const MAX_SEQUENCE_VALUE = 2n ** 63n - 1n;
/** The longest stream line (and ID) when the catalogue gives no `max_lengths` for its form (an older server). */
const MAX_LINE_CHARS = 4096;
/** What a batch answer may hold besides its IDs' texts (the JSON around them, a scheme's extra fields), in bytes. */
const FRAMING_BYTES = 4096;
const SEQUENCE_DIGITS = /^(?:0|[1-9][0-9]{0,18})$/;
/** The `format` of public IDs (docs/public-ids.md): keyed masks that keep no order and are no integers. */
const PUBLIC_FORMAT = "public";
/** A sequence integer's public text: 17 Crockford base32 characters, then the key id (1..F). */
const PUBLIC_SEQUENCE_TEXT = /^[0-9A-HJKMNP-TV-Z]{17}[1-9A-F]$/;
/** Most texts one POST /v1/public reads: revealMany() splits above it. */
const MAX_REVEAL_TEXTS = 10_000;

/** A client's settings. */
export interface ClientOptions {
  /** Milliseconds: a deadline for each whole call, failover included (a stream: each stretch without a complete ID). Default 10,000. */
  timeoutMs?: number;
  /** Sent as `Authorization: Bearer <key>`. */
  apiKey?: string;
  /** Milliseconds a buffered ID may wait before newId discards it unused (null: no limit). Default 1,000. */
  maxAgeMs?: number | null;
  /** false: newId asks the server every time. Default true. */
  buffer?: boolean;
  /** Bounds (IDs) of the adaptive refill size; maxRefill is also capped by the server's max count. Defaults 64, 100,000. */
  minRefill?: number;
  maxRefill?: number;
  /** The fetch to use (tests); default the platform's. Redirects are never followed. */
  fetch?: typeof fetch;
}

interface Request {
  method: string;
  path: string;
  scope: string;
  what: string;
  params?: Record<string, string>;
  advance?: boolean;
  deadline?: number;
  signal?: AbortSignal;
  /** The longest answer read, in bytes (default MAX_ANSWER_BYTES). */
  limit?: number;
  /** A JSON request body. */
  body?: unknown;
  /** A 404 is UnknownPublicIdError (a reveal call). */
  publicIds?: boolean;
}

interface SchemeJson {
  name: string;
  formats?: string[];
  canonical_format?: string;
  token_patterns?: Record<string, string>;
  max_lengths?: Record<string, number>;
  rising?: Record<string, Record<string, string[]>>;
  rising_per_identity?: Record<string, unknown>;
  node?: Record<string, unknown>;
  limits?: { max_count?: number; max_stream_count?: number };
}

function issuePath(scheme: string, stream: boolean): string {
  return `/v1/ids/${encodeURIComponent(scheme)}${stream ? "/stream" : ""}`;
}

function issueParams(count: number, is: IssueOptions): Record<string, string> {
  const params: Record<string, string> = { count: String(count) };
  if (is.format !== undefined) params.format = is.format;
  for (const [name, value] of Object.entries(is.options ?? {})) params[name] = String(value);
  return params;
}

function keyOf(scheme: string, is: IssueOptions | undefined): string {
  if (!is || (is.format === undefined && !is.options)) return scheme;
  const options = Object.entries(is.options ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return JSON.stringify([scheme, is.format ?? null, options]);
}

function seconds(ms: number): string {
  return String(ms / 1000);
}

/** The most bytes a batch answer of `count` IDs of `shape` can need: each ID's longest text, quoted, comma-separated. */
function batchLimit(count: number, shape: IdShape): number {
  return count * (shape.longest + 3) + FRAMING_BYTES;
}

/** CallAbortedError when the caller's `signal` has aborted. */
function checkSignal(signal: AbortSignal | undefined): void {
  if (signal?.aborted) throw new CallAbortedError(signal.reason);
}

/** `promise`, or CallAbortedError as soon as `signal` aborts. */
function abortable<T>(promise: Promise<T>, signal: AbortSignal | undefined): Promise<T> {
  if (!signal) return promise;
  checkSignal(signal);
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new CallAbortedError(signal.reason));
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => {
        signal.removeEventListener("abort", onAbort);
        resolve(value);
      },
      (error: unknown) => {
        signal.removeEventListener("abort", onAbort);
        reject(error);
      },
    );
  });
}

function decodedOf(data: Record<string, unknown>): Decoded {
  return {
    scheme: String(data.scheme),
    id: String(data.id),
    hex: String(data.hex),
    timestamp: typeof data.timestamp === "string" ? data.timestamp : null,
    fields: (data.fields as Record<string, unknown>) ?? {},
  };
}

/** One opened item of a reveal answer for `text`; Failed when it is not what the API promises. */
function revealedOf(text: string, item: Record<string, unknown>): Revealed {
  const { id, scheme, key_id: keyId, decoded } = item;
  const shown = text.slice(0, 40);
  if (typeof id !== "string" || typeof scheme !== "string" || id === "" || scheme === "") {
    throw new Failed(`reveal answer for '${shown}' has no id and scheme`);
  }
  if (typeof keyId !== "number" || !Number.isInteger(keyId) || keyId < 1 || keyId > 15) {
    throw new Failed(`reveal answer for '${shown}' has key_id ${JSON.stringify(keyId)}, not 1..15`);
  }
  if (decoded !== null && decoded !== undefined && typeof decoded !== "object") {
    throw new Failed(`reveal answer for '${shown}' has a decoded reading that is not an object`);
  }
  const reading = decoded ? decodedOf(decoded as Record<string, unknown>) : null;
  return { text, id, scheme, keyId, decoded: reading };
}

function sequenceInteger(value: unknown, what: string): bigint {
  if (typeof value === "string" && SEQUENCE_DIGITS.test(value)) {
    const v = BigInt(value);
    if (v <= MAX_SEQUENCE_VALUE) return v;
  }
  throw new Failed(`${what} is not a sequence integer (decimal digits in 0..2**63-1): '${String(value).slice(0, 40)}'`);
}

/**
 * A client of an idmint fleet. Replicas are tried round-robin with failover; every answer is checked (its IDs
 * against the scheme's token pattern from GET /v1/schemes, and for repeats) before any of it is handed out, and
 * one that is not what the API promises fails its replica like a dead one. Every call throws only IdmintClientError
 * subclasses: NoReplicaAvailableError when every replica refused or failed, RequestRejectedError subclasses (never retried)
 * when the request itself is wrong. Call close() when done.
 */
export class Client {
  readonly urls: readonly string[];
  readonly timeoutMs: number;
  readonly maxAgeMs: number | null;
  private readonly apiKey: string | undefined;
  private readonly buffered: boolean;
  private readonly minRefill: number;
  private readonly maxRefill: number;
  private readonly fetcher: typeof fetch;
  private readonly replicas: ReplicaSet;
  private readonly fleets = new FleetCheck();
  private readonly repeats = new Repeats();
  private readonly buffers = new Map<string, IdBuffer>();
  private catalogue = new Map<string, SchemeJson>();
  private shapes = new Map<string, IdShape>();
  private maxCount = 0;
  private closed = false;
  private readonly background = new AbortController();

  constructor(replicas: string | readonly string[], options: ClientOptions = {}) {
    this.urls = normaliseUrls(replicas);
    this.timeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.maxAgeMs = options.maxAgeMs === undefined ? DEFAULT_MAX_AGE_MS : options.maxAgeMs;
    this.apiKey = options.apiKey;
    this.buffered = options.buffer ?? true;
    this.minRefill = options.minRefill ?? DEFAULT_MIN_REFILL;
    this.maxRefill = options.maxRefill ?? DEFAULT_MAX_REFILL;
    this.fetcher = options.fetch ?? globalThis.fetch.bind(globalThis);
    if (!(this.timeoutMs > 0)) throw new RangeError(`timeoutMs must be > 0, got ${this.timeoutMs}`);
    if (this.maxAgeMs !== null && !(this.maxAgeMs > 0)) {
      throw new RangeError(`maxAgeMs must be > 0 or null, got ${this.maxAgeMs}`);
    }
    if (!(this.minRefill >= 1 && this.minRefill <= this.maxRefill)) {
      throw new RangeError(
        `refill bounds must satisfy 1 <= minRefill <= maxRefill, got ${this.minRefill}, ${this.maxRefill}`,
      );
    }
    this.replicas = new ReplicaSet(this.urls);
  }

  /** Stop background refills; buffered IDs are dropped; later calls throw ClientClosedError. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.background.abort();
    for (const b of this.buffers.values()) b.clear();
  }

  // -- newId: the hot path ---------------------------------------------------------------------------------------

  /**
   * One fresh ID of `scheme` from this client's buffer for (scheme, options, format), refilled in the background
   * before it runs dry; IDs older than maxAgeMs are discarded unused. No two calls ever return the same ID.
   * Throws NoReplicaAvailableError when the buffer is empty and no replica can issue, ValidationError / UnknownSchemeError for a
   * bad scheme, option or format.
   */
  async newId(scheme: string, options?: IssueOptions): Promise<string> {
    const key = options === undefined ? scheme : keyOf(scheme, options);
    const head = this.buffers.get(key)?.head;
    if (head && head.pos < head.ids.length && performance.now() < head.deadline) {
      return head.ids[head.pos++] as string;
    }
    return this.newIdSlow(key, scheme, options ?? {});
  }

  private async newIdSlow(key: string, scheme: string, is: IssueOptions): Promise<string> {
    if (this.closed) throw new ClientClosedError("client is closed");
    if (!this.buffered) return (await this.ids(scheme, 1, is))[0] as string;
    let b = this.buffers.get(key);
    if (!b) {
      b = new IdBuffer(scheme, is, this.minRefill, this.maxRefill, this.maxAgeMs);
      this.buffers.set(key, b);
    }
    let missed = false;
    for (;;) {
      if (this.closed) throw new ClientClosedError("client is closed");
      const now = performance.now();
      const head = b.head;
      if (head) {
        if (head.pos < head.ids.length && now < head.deadline) return head.ids[head.pos++] as string;
        b.retire(now);
      }
      if (b.nextSegment(now)) {
        if (b.wantsRefill(this.maxCount)) this.schedule(b);
        continue;
      }
      if (!missed) {
        missed = true;
        b.noteMiss();
      }
      if (b.refill) {
        const generation = b.generation;
        await abortable(b.refill, is.signal);
        if (b.generation !== generation && b.queue.length === 0 && b.lastError !== null) throw b.lastError;
        continue;
      }
      const fetched = this.fetchBatch(b, undefined, is.signal);
      b.refill = fetched.then(
        () => undefined,
        () => undefined,
      );
      try {
        const [ids, started, latency] = await fetched;
        b.end(null);
        b.noteDrawn(1, performance.now());
        b.add(ids.slice(1), started, latency);
        return ids[0] as string;
      } catch (error) {
        b.end(error);
        throw error;
      }
    }
  }

  /** One refill request through the stream route (its text costs less to read than JSON). */
  private async fetchBatch(
    b: IdBuffer,
    signal: AbortSignal | undefined,
    caller?: AbortSignal,
  ): Promise<[string[], number, number]> {
    const size = b.refillSize(this.maxCount);
    const started = performance.now();
    let ids: string[] = [];
    const issue = { format: b.issue.format, options: b.issue.options, signal: caller };
    for await (const chunk of this.streamChunks(b.scheme, size, issue, true, signal)) ids = ids.concat(chunk);
    return [ids, started, (performance.now() - started) / 1000];
  }

  private schedule(b: IdBuffer): void {
    b.refill = this.fetchBatch(b, this.background.signal).then(
      ([ids, started, latency]) => {
        b.end(null);
        if (this.closed) return;
        b.add(ids, started, latency);
        if (b.wantsRefill(this.maxCount)) this.schedule(b);
      },
      (error: unknown) => b.end(error),
    );
  }

  // -- batches, streams, decode, schemes ---------------------------------------------------------------------------

  /**
   * `count` fresh IDs of `scheme` (unbuffered), in issue order. Above the server's max count the request is split
   * into several batch calls. Throws ValidationError (count, option or format), UnknownSchemeError, NoReplicaAvailableError.
   */
  async ids(scheme: string, count: number, options: IssueOptions = {}): Promise<string[]> {
    const deadline = performance.now() + this.timeoutMs;
    await this.shape(scheme, options.format, deadline, options.signal);
    let cap = this.maxCount;
    if (cap === 0 || count <= cap) {
      try {
        return await this.issue(scheme, count, options, deadline);
      } catch (error) {
        cap = countRange(error);
        if (cap < 1 || cap >= count) throw error;
        this.maxCount = cap;
      }
    }
    let out: string[] = [];
    while (out.length < count) {
      out = out.concat(await this.issue(scheme, Math.min(cap, count - out.length), options, deadline));
    }
    return out;
  }

  private async issue(scheme: string, count: number, is: IssueOptions, deadline: number): Promise<string[]> {
    const shape = await this.shape(scheme, is.format, deadline, is.signal);
    const key = keyOf(scheme, is);
    return this.call(
      {
        method: "GET",
        path: issuePath(scheme, false),
        scope: scheme,
        what: `issue ${count} ${scheme}`,
        params: issueParams(count, is),
        deadline,
        signal: is.signal,
        limit: batchLimit(count, shape),
      },
      async (text) => {
        let body: { ids?: unknown; scheme?: unknown; format?: unknown };
        try {
          body = JSON.parse(text) as { ids?: unknown };
        } catch (error) {
          throw new Failed(`unreadable batch answer: ${error}`);
        }
        if (shape.missing === null && (body?.scheme !== shape.scheme || body?.format !== shape.format)) {
          throw new Failed(
            `answer is labelled scheme '${body?.scheme}' format '${body?.format}', asked scheme '${shape.scheme}' format '${shape.format}'`,
          );
        }
        const ids = body?.ids;
        if (!Array.isArray(ids) || ids.length !== count) {
          throw new Failed(`batch answer holds ${Array.isArray(ids) ? ids.length : "?"} IDs, asked for ${count}`);
        }
        const checked = shape.checkIds(ids);
        this.repeats.check(key, checked, "ID", 1, shape.rule(is.options));
        return checked;
      },
    );
  }

  /**
   * `count` IDs of `scheme` from the stream route, one at a time, with memory that does not grow with `count`.
   * When a replica fails mid-way (a refusal, a lost connection, a truncated transfer), the stream carries on from
   * another replica for the remaining count; only complete, checked lines are yielded, so every ID was fully issued
   * and none twice. Throws ValidationError / UnknownSchemeError at once; NoReplicaAvailableError (`delivered`: IDs already
   * yielded) when no replica can go on.
   */
  async *stream(scheme: string, count: number, options: IssueOptions = {}): AsyncGenerator<string, void, undefined> {
    for await (const chunk of this.streamChunks(scheme, count, options, false, undefined)) yield* chunk;
  }

  /** Like stream(), yielding arrays of IDs as they arrive (cheaper per ID for bulk jobs). */
  streamChunks(scheme: string, count: number, options?: IssueOptions): AsyncGenerator<string[], void, undefined>;
  streamChunks(
    scheme: string,
    count: number,
    options: IssueOptions,
    wholeCall: boolean,
    signal: AbortSignal | undefined,
  ): AsyncGenerator<string[], void, undefined>;
  async *streamChunks(
    scheme: string,
    count: number,
    options: IssueOptions = {},
    wholeCall = false,
    signal?: AbortSignal,
  ): AsyncGenerator<string[], void, undefined> {
    if (this.closed) throw new ClientClosedError("client is closed");
    const caller = options.signal;
    checkSignal(caller);
    let deadline = performance.now() + this.timeoutMs;
    const shape = await this.shape(scheme, options.format, deadline, caller);
    const key = keyOf(scheme, options);
    const rising = shape.rule(options.options);
    const path = issuePath(scheme, true);
    let delivered = 0;
    const reasons: Record<string, string> = {};
    for (;;) {
      const [plan, skipped] = await this.plan(scheme, true, deadline);
      checkSignal(caller);
      Object.assign(reasons, skipped);
      let progress = false;
      for (const [index, base] of plan.entries()) {
        if (this.closed) throw new ClientClosedError("client is closed");
        const before = delivered;
        if (performance.now() >= deadline) {
          reasons[base] = `not tried: the timeout of ${seconds(this.timeoutMs)} s passed`;
          continue;
        }
        const controller = new AbortController();
        const onAbort = () => controller.abort();
        signal?.addEventListener("abort", onAbort);
        caller?.addEventListener("abort", onAbort);
        const share = (deadline - performance.now()) / (plan.length - index);
        let shareFired = false;
        let timer = setTimeout(() => {
          shareFired = true;
          controller.abort();
        }, share);
        try {
          const response = await this.send("GET", base + path, issueParams(count - delivered, options), controller);
          clearTimeout(timer);
          timer = setTimeout(onAbort, deadline - performance.now());
          if (response.status >= 300 || response.status === 0) await check(response, base + path, false);
          const kind = response.headers.get("content-type") ?? "";
          if (!kind.startsWith("text/plain")) {
            await response.body?.cancel().catch(() => undefined);
            throw new Failed(`stream answer is '${kind || "untyped"}', not text/plain`);
          }
          const declared = Number(response.headers.get("content-length") ?? "");
          const need = (count - delivered) * (shape.longest + 1);
          if (declared > need) {
            await response.body?.cancel().catch(() => undefined);
            throw tooLong(declared, need);
          }
          if (!response.body) throw new Failed("stream answer has no body");
          const reader = response.body.getReader();
          const decoder = new TextDecoder("utf-8");
          let partial = "";
          let last: string | undefined; // a new stream: a new generator, maybe below the last one's
          try {
            for (;;) {
              const { done, value } = await reader.read();
              if (done) break;
              const text = partial + decoder.decode(value, { stream: true });
              const cut = text.lastIndexOf("\n");
              if (text.length - cut - 1 > shape.longest) {
                const number = delivered - before + 1 + (cut < 0 ? 0 : text.slice(0, cut + 1).split("\n").length - 1);
                throw new Failed(
                  `line ${number} is longer than ${shape.longest} characters, the longest ID: refused unread`,
                );
              }
              if (cut < 0) {
                partial = text;
                continue;
              }
              const complete = text.slice(0, cut);
              partial = text.slice(cut + 1);
              if (/[^\t-~]/.test(complete)) throw new Failed("stream is not ASCII text");
              const lines = complete.split("\n");
              const first = delivered - before + 1;
              shape.checkText(complete, lines, first);
              this.repeats.check(key, lines, "line", first, rising, last);
              last = lines[lines.length - 1];
              if (delivered + lines.length > count) {
                throw new Failed(`stream sent more than the ${count - before} IDs asked for`);
              }
              delivered += lines.length;
              if (!wholeCall) clearTimeout(timer);
              yield lines;
              if (!wholeCall) {
                deadline = performance.now() + this.timeoutMs;
                timer = setTimeout(onAbort, this.timeoutMs);
              }
            }
          } finally {
            reader.cancel().catch(() => undefined);
          }
          if (delivered < count || partial !== "") {
            throw new Failed(`stream ended after ${delivered - before} of ${count - before} IDs`);
          }
          this.replicas.succeeded(base, scheme);
          return;
        } catch (error) {
          if (signal?.aborted) throw new ClientClosedError("client is closed");
          checkSignal(caller);
          if (error instanceof IdmintClientError) throw error;
          let reason = this.classify(base, scheme, error, controller.signal.aborted, shareFired ? share : 0);
          if (!(error instanceof Failed) && !(error instanceof Refused)) {
            reason += ` (after ${delivered - before} IDs)`;
            this.replicas.failed(base, reason);
          }
          reasons[base] = reason;
        } finally {
          clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
          caller?.removeEventListener("abort", onAbort);
        }
        progress = progress || delivered > before;
      }
      if (!progress) {
        throw new NoReplicaAvailableError(
          `stream ${count} ${scheme} (${delivered} delivered)`,
          this.ordered(reasons),
          delivered,
        );
      }
    }
  }

  /**
   * Decode `id` (any accepted text form). With `scheme`: that reading; without: every scheme that accepts it, the
   * plausible readings first. Throws ValidationError naming the rule the ID breaks, UnknownSchemeError, NoReplicaAvailableError.
   */
  decode(id: string, scheme?: undefined, options?: CallOptions): Promise<Candidates>;
  decode(id: string, scheme: string, options?: CallOptions): Promise<Decoded>;
  async decode(id: string, scheme?: string, options: CallOptions = {}): Promise<Decoded | Candidates> {
    const path =
      scheme === undefined
        ? `/v1/decode/${encodeURIComponent(id)}`
        : `/v1/decode/${encodeURIComponent(scheme)}/${encodeURIComponent(id)}`;
    const r = { method: "GET", path, scope: ALL_SCOPES, what: `decode '${id}'`, signal: options.signal };
    return this.call(r, async (text) => {
      const data = parseJson(text) as Record<string, unknown>;
      if (scheme !== undefined) return decodedOf(data);
      const candidates = ((data.candidates as Record<string, unknown>[]) ?? []).map(decodedOf);
      return { input: String(data.input), candidates, best: candidates[0] as Decoded };
    });
  }

  /** The schemes the fleet serves (GET /v1/schemes of one replica), with their forms and limits. */
  schemes(options: CallOptions = {}): Promise<SchemeInfo[]> {
    return this.fetchCatalogue(true, performance.now() + this.timeoutMs, options.signal);
  }

  private async fetchCatalogue(advance: boolean, deadline: number, signal?: AbortSignal): Promise<SchemeInfo[]> {
    const raws = await this.call(
      { method: "GET", path: "/v1/schemes", scope: ALL_SCOPES, what: "schemes", advance, deadline, signal },
      async (text) => {
        const data = parseJson(text) as { schemes?: unknown };
        if (!Array.isArray(data?.schemes)) throw new Failed("unreadable answer: no schemes");
        return data.schemes as SchemeJson[];
      },
    );
    const catalogue = new Map<string, SchemeJson>();
    const infos: SchemeInfo[] = [];
    let maxCount = 0;
    for (const s of raws) {
      if (!s || typeof s.name !== "string") continue;
      catalogue.set(s.name, s);
      const limit = s.limits?.max_count ?? 0;
      if (limit > 0 && (maxCount === 0 || limit < maxCount)) maxCount = limit;
      const formats = s.formats ?? [];
      infos.push({
        name: s.name,
        formats,
        canonicalFormat: s.canonical_format ?? formats[0] ?? "",
        maxCount: s.limits?.max_count ?? null,
        maxStreamCount: s.limits?.max_stream_count ?? null,
        node: s.node ?? {},
        tokenPatterns: s.token_patterns ?? {},
        raw: s as unknown as Record<string, unknown>,
      });
    }
    this.catalogue = catalogue;
    this.shapes = new Map();
    if (maxCount > 0) this.maxCount = maxCount;
    return infos;
  }

  private async shape(
    scheme: string,
    format: string | undefined,
    deadline: number,
    signal?: AbortSignal,
  ): Promise<IdShape> {
    const known = this.knownShape(scheme, format, false);
    if (known) return known;
    await this.fetchCatalogue(false, deadline, signal);
    return this.knownShape(scheme, format, true) as IdShape;
  }

  private knownShape(scheme: string, format: string | undefined, fetched: boolean): IdShape | null {
    const key = `${scheme} ${format ?? ""}`;
    const cached = this.shapes.get(key);
    if (cached) return cached;
    const info = this.catalogue.get(scheme);
    if (!info && !fetched) return null;
    const canonical = info?.canonical_format ?? info?.formats?.[0];
    const form = format === undefined || format === "canonical" ? canonical : format;
    const keyed = form === PUBLIC_FORMAT; // public IDs keep no order and are no integers: the recent-ID rule only
    const shape = new IdShape(
      scheme,
      form ?? "canonical",
      form ? info?.token_patterns?.[form] : undefined,
      form && !keyed ? info?.rising?.[form] : undefined,
      form && !keyed ? info?.rising_per_identity?.[form] : undefined,
      (form ? info?.max_lengths?.[form] : undefined) ?? MAX_LINE_CHARS,
    );
    this.shapes.set(key, shape);
    return shape;
  }

  // -- sequences -------------------------------------------------------------------------------------------------

  /**
   * `count` integers of sequence `name` (1..the server's max count), rising, exact (asked as strings). Never the
   * same integer twice from any server of the fleet; a call that fails over leaves a gap, never a repeat. Throws
   * ValidationError (count, name), UnknownSequenceError, NoReplicaAvailableError, SequenceStoresDifferError.
   *
   * `{ format: "public" }`: the integers' public texts instead (docs/public-ids.md: 18 characters, in no order,
   * read back with reveal()), a string[]; ValidationError when the server has no public-ID keys. No text is handed
   * out twice (checked against the recent texts of the sequence).
   */
  next(name: string, count?: number, options?: CallOptions): Promise<bigint[]>;
  next(name: string, count: number, options: PublicNextOptions): Promise<string[]>;
  next(name: string, count = 1, options: CallOptions | PublicNextOptions = {}): Promise<bigint[] | string[]> {
    if ("format" in options && options.format !== undefined) return this.nextPublic(name, count, options);
    return this.call(
      {
        method: "GET",
        path: `/v1/sequences/${encodeURIComponent(name)}/next`,
        scope: SEQUENCE_SCOPE + name,
        what: `next ${count} of sequence ${name}`,
        params: { count: String(count), format: "string" },
        signal: options.signal,
      },
      async (text) => {
        const body = parseJson(text, "next") as { name?: unknown; ids?: unknown };
        const ids = body?.ids;
        if (body?.name !== name || !Array.isArray(ids) || ids.length !== count) {
          throw new Failed(
            `next answer for '${body?.name}' holds ${Array.isArray(ids) ? ids.length : "?"} integers; asked ${count} of '${name}'`,
          );
        }
        const values = ids.map((v, i) => sequenceInteger(v, `integer ${i + 1}`));
        for (let i = 1; i < values.length; i++) {
          if ((values[i] as bigint) <= (values[i - 1] as bigint)) {
            throw new Failed(`next answer is not rising at integer ${i + 1}: ${values[i - 1]} then ${values[i]}`);
          }
        }
        this.repeats.checkNext(name, values);
        return values;
      },
    );
  }

  private nextPublic(name: string, count: number, options: PublicNextOptions): Promise<string[]> {
    if (options.format !== PUBLIC_FORMAT) {
      throw new TypeError(`format must be '${PUBLIC_FORMAT}' (or none: the integers), got '${options.format}'`);
    }
    return this.call(
      {
        method: "GET",
        path: `/v1/sequences/${encodeURIComponent(name)}/next`,
        scope: SEQUENCE_SCOPE + name,
        what: `next ${count} of sequence ${name}`,
        params: { count: String(count), format: PUBLIC_FORMAT },
        signal: options.signal,
      },
      async (text) => {
        const body = parseJson(text, "next") as { name?: unknown; ids?: unknown };
        const ids = body?.ids;
        if (body?.name !== name || !Array.isArray(ids) || ids.length !== count) {
          throw new Failed(
            `next answer for '${body?.name}' holds ${Array.isArray(ids) ? ids.length : "?"} public IDs; asked ${count} of '${name}'`,
          );
        }
        ids.forEach((one, i) => {
          if (typeof one !== "string" || !PUBLIC_SEQUENCE_TEXT.test(one)) {
            throw new Failed(
              `public ID ${i + 1} is not a sequence integer's public text: '${String(one).slice(0, 40)}'`,
            );
          }
        });
        this.repeats.check(`${SEQUENCE_SCOPE}${name} ${PUBLIC_FORMAT}`, ids as string[], "public ID");
        return ids as string[];
      },
    );
  }

  /**
   * A fresh contiguous range of `count` integers (1..2**40) of sequence `name`, reserved in storage for the caller
   * (POST /v1/sequences/{name}/range), for offline jobs. Throws as next(); a range past 2**63-1 is a ValidationError.
   */
  range(name: string, count: number | bigint, options: CallOptions = {}): Promise<SequenceRange> {
    const asked = BigInt(count);
    return this.call(
      {
        method: "POST",
        path: `/v1/sequences/${encodeURIComponent(name)}/range`,
        scope: SEQUENCE_SCOPE + name,
        what: `range of ${count} of sequence ${name}`,
        params: { count: asked.toString(), format: "string" },
        signal: options.signal,
      },
      async (text) => {
        const body = parseJson(text, "range") as Record<string, unknown>;
        const first = sequenceInteger(body?.first, "first");
        const last = sequenceInteger(body?.last, "last");
        if (
          body.name !== name ||
          last - first + 1n !== asked ||
          typeof body.count !== "number" ||
          BigInt(body.count) !== asked
        ) {
          throw new Failed(
            `range answer '${body.name}' ${body.first}..${body.last} (count ${body.count}) is not ${count} of '${name}'`,
          );
        }
        this.repeats.checkRange(name, first, last);
        return { name, first, last, count: asked };
      },
    );
  }

  // -- public IDs --------------------------------------------------------------------------------------------------

  /**
   * The internal ID behind public ID `text` (GET /v1/public/{text}): its canonical form, scheme, key id and decode
   * reading. Throws UnknownPublicIdError (404: no key in force opens it), ValidationError (the server has no
   * public-ID keys), UnauthorizedError or ForbiddenError (no decode scope), NoReplicaAvailableError.
   */
  reveal(text: string, options: CallOptions = {}): Promise<Revealed> {
    const r = {
      method: "GET",
      path: `/v1/public/${encodeURIComponent(text)}`,
      scope: ALL_SCOPES,
      what: `reveal '${text.slice(0, 40)}'`,
      signal: options.signal,
      publicIds: true,
    };
    return this.call(r, async (answer) => {
      const body = parseJson(answer, "reveal");
      if (!body || typeof body !== "object") throw new Failed("reveal answer is not an object");
      return revealedOf(text, body as Record<string, unknown>);
    });
  }

  /**
   * Every text of `texts` read back (POST /v1/public, 10,000 texts a request): one item per text, in order, a
   * Revealed or, for a text no key in force opens, an Unrevealed (its `error`). Throws ValidationError (no public-ID
   * keys), UnauthorizedError, ForbiddenError, NoReplicaAvailableError.
   */
  async revealMany(texts: readonly string[], options: CallOptions = {}): Promise<(Revealed | Unrevealed)[]> {
    const out: (Revealed | Unrevealed)[] = [];
    const deadline = performance.now() + this.timeoutMs;
    for (let start = 0; start < texts.length; start += MAX_REVEAL_TEXTS) {
      const part = texts.slice(start, start + MAX_REVEAL_TEXTS);
      const r = {
        method: "POST",
        path: "/v1/public",
        scope: ALL_SCOPES,
        what: `reveal ${part.length} public IDs`,
        signal: options.signal,
        deadline,
        body: { texts: part },
      };
      out.push(
        ...(await this.call(r, async (answer) => {
          const items = (parseJson(answer, "reveal") as { items?: unknown })?.items;
          if (!Array.isArray(items) || items.length !== part.length) {
            throw new Failed(
              `reveal answer holds ${Array.isArray(items) ? items.length : "?"} items for ${part.length} texts`,
            );
          }
          return items.map((item, i): Revealed | Unrevealed => {
            const text = part[i] as string;
            if (!item || typeof item !== "object") {
              throw new Failed(`reveal answer's item for '${text.slice(0, 40)}' is not an object`);
            }
            const error = (item as { error?: unknown }).error;
            if (error === undefined || error === null) return revealedOf(text, item as Record<string, unknown>);
            if (typeof error !== "string")
              throw new Failed(`reveal answer's error for '${text.slice(0, 40)}' is not a string`);
            return { text, error };
          });
        })),
      );
    }
    return out;
  }

  // -- failover ----------------------------------------------------------------------------------------------------

  private async send(
    method: string,
    url: string,
    params: Record<string, string> | undefined,
    controller: AbortController,
    body?: unknown,
  ): Promise<Response> {
    const headers: Record<string, string> = {};
    if (this.apiKey !== undefined) headers.authorization = `Bearer ${this.apiKey}`;
    const query = params ? `?${new URLSearchParams(params).toString()}` : "";
    const init: RequestInit = { method, headers, signal: controller.signal, redirect: "manual" };
    if (body !== undefined) {
      headers["content-type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    return this.fetcher(url + query, init);
  }

  /** The replicas to try for `scope` (and why others are out), each one's fleet read first. Throws FleetOverlapError. */
  private async plan(scope: string, advance: boolean, deadline: number): Promise<[string[], Record<string, string>]> {
    const [plan, reasons] = this.replicas.plan(scope, advance);
    for (const base of this.fleets.unread(plan)) {
      const controller = new AbortController();
      const share = Math.min(deadline - performance.now(), this.timeoutMs / this.urls.length);
      const timer = setTimeout(() => controller.abort(), Math.max(share, 0));
      try {
        const response = await this.send("GET", `${base}/v1/fleet`, undefined, controller);
        let doc = null;
        if (response.status === 404) {
          await response.body?.cancel().catch(() => undefined);
        } else if (response.status !== 200) {
          await check(response, `${base}/v1/fleet`, false).catch((error: unknown) => {
            throw new Failed(error instanceof Error ? error.message : String(error));
          });
          throw new Failed(`${response.status}`);
        } else {
          doc = parseFleet(parseJson(await readText(response, MAX_ANSWER_BYTES), "fleet"));
        }
        await this.fleets.learn(base, doc, (other) => this.memberLive(other, doc?.member ?? "", deadline));
      } catch (error) {
        if (error instanceof IdmintClientError) throw error;
        const reason = `its fleet (/v1/fleet) could not be read: ${this.reasonOf(error, controller.signal.aborted)}`;
        reasons[base] = reason;
        this.replicas.failed(base, reason);
      } finally {
        clearTimeout(timer);
      }
    }
    return [plan.filter((url) => this.fleets.docs.has(url)), reasons];
  }

  private async memberLive(base: string, token: string, deadline: number): Promise<boolean | null> {
    const controller = new AbortController();
    const share = Math.min(deadline - performance.now(), this.timeoutMs / this.urls.length);
    const timer = setTimeout(() => controller.abort(), Math.max(share, 0));
    try {
      const response = await this.send(
        "GET",
        `${base}/v1/fleet/members/${encodeURIComponent(token)}`,
        undefined,
        controller,
      );
      if (response.status !== 200) return null;
      const live = ((await response.json()) as { live?: unknown })?.live;
      return typeof live === "boolean" ? live : null;
    } catch {
      return null;
    } finally {
      clearTimeout(timer);
    }
  }

  private reasonOf(error: unknown, timedOut: boolean, share = 0): string {
    if (error instanceof Refused) return error.reason;
    if (timedOut && share > 0) {
      return `timeout: no answer began within ${(share / 1000).toPrecision(2)} s, this replica's share of the call's time`;
    }
    if (timedOut) return `timeout: the call's timeout of ${seconds(this.timeoutMs)} s passed`;
    if (error instanceof Failed) return error.reason;
    if (error instanceof Error) {
      const cause = (error as { cause?: unknown }).cause;
      return cause instanceof Error ? `${error.message}: ${cause.message}` : error.message;
    }
    return String(error);
  }

  /** Record a replica's failure or refusal for `scope`; its reason. */
  private classify(base: string, scope: string, error: unknown, timedOut: boolean, share = 0): string {
    if (error instanceof Refused) {
      this.replicas.refused(base, scope, error);
      return error.reason;
    }
    const reason = this.reasonOf(error, timedOut, share);
    this.replicas.failed(base, reason);
    return reason;
  }

  /**
   * Send `r` to the replicas in turn until one answers and `parse` accepts its answer's text (read up to `r.limit`
   * bytes: a longer one fails its replica unread). Each attempt's answer must begin within its share of the time
   * left (the time left over the replicas left to ask, all of it for the last), so a replica that accepts and never
   * answers costs a share of the call, not all of it.
   */
  private async call<T>(r: Request, parse: (text: string) => Promise<T>): Promise<T> {
    if (this.closed) throw new ClientClosedError("client is closed");
    const caller = r.signal;
    checkSignal(caller);
    const deadline = r.deadline ?? performance.now() + this.timeoutMs;
    const [plan, reasons] = await this.plan(r.scope, r.advance ?? true, deadline);
    checkSignal(caller);
    const sequence = r.scope.startsWith(SEQUENCE_SCOPE);
    if (sequence) this.fleets.checkOneFleet(this.urls);
    let timedOut = false;
    for (const [index, base] of plan.entries()) {
      if (timedOut || performance.now() >= deadline) {
        reasons[base] = `not tried: the timeout of ${seconds(this.timeoutMs)} s passed`;
        continue;
      }
      const controller = new AbortController();
      const onAbort = () => controller.abort();
      caller?.addEventListener("abort", onAbort);
      const share = (deadline - performance.now()) / (plan.length - index);
      let shareFired = false;
      let timer = setTimeout(() => {
        shareFired = true;
        controller.abort();
      }, share);
      try {
        const response = await this.send(r.method, base + r.path, r.params, controller, r.body);
        clearTimeout(timer);
        timer = setTimeout(onAbort, deadline - performance.now());
        await check(response, base + r.path, sequence).catch((error: unknown) => {
          if (r.publicIds && error instanceof UnknownSchemeError) {
            throw new UnknownPublicIdError(error.status, error.detail, error.url);
          }
          throw error;
        });
        const result = await parse(await readText(response, r.limit ?? MAX_ANSWER_BYTES));
        this.replicas.succeeded(base, r.scope);
        return result;
      } catch (error) {
        checkSignal(caller);
        if (error instanceof IdmintClientError) throw error;
        const last = index === plan.length - 1;
        reasons[base] = this.classify(base, r.scope, error, controller.signal.aborted, shareFired && !last ? share : 0);
        // Our timer fired: the call's deadline has passed, even when Node's millisecond timer fired a fraction of a
        // millisecond before performance.now() reaches it (the next replica would be asked with no time left).
        timedOut = controller.signal.aborted && (!shareFired || last);
      } finally {
        clearTimeout(timer);
        caller?.removeEventListener("abort", onAbort);
      }
    }
    throw new NoReplicaAvailableError(r.what, this.ordered(reasons));
  }

  private ordered(reasons: Record<string, string>): Record<string, string> {
    return Object.fromEntries(this.urls.map((url) => [url, reasons[url] ?? "not tried"]));
  }
}

function parseJson(text: string, what = ""): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Failed(`unreadable ${what ? `${what} ` : ""}answer: ${error}`);
  }
}
