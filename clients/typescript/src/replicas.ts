import {
  Failed,
  ForbiddenError,
  Refused,
  RequestRejectedError,
  UnauthorizedError,
  UnknownSchemeError,
  UnknownSequenceError,
  ValidationError,
} from "./errors.js";

/**
 * Failover bookkeeping (the same rules in every idmint client): replicas are tried round-robin (call n starts at
 * replica n mod N); a 503 or 429 moves on and keeps the refusing replica out of that scope (scheme or sequence)
 * for its Retry-After; a connection error or a failed answer moves on and keeps the replica out of every scope for
 * FAILED_BACKOFF_MS, but such a replica is still tried, last, when nothing else is left. A 4xx other than 429 is
 * the request's fault: raised at once, never asked of another replica.
 */

export const FAILED_BACKOFF_MS = 1000;
export const DEFAULT_RETRY_AFTER_S = 1;
export const ALL_SCOPES = "";
export const SEQUENCE_SCOPE = "sequence:";
const COUNT_RANGE = /count must be (?:an integer )?in 1\.\.(\d+)/;

interface Mark {
  until: number;
  reason: string;
  honoured: boolean;
}

export class ReplicaSet {
  private turn = 0;
  private readonly out = new Map<string, Mark>();

  constructor(readonly urls: readonly string[]) {}

  /** The replicas to try for `scope` in order, and why others are skipped (a server asked to wait). */
  plan(scope: string, advance: boolean): [string[], Record<string, string>] {
    const start = advance ? this.turn++ : this.turn;
    const now = performance.now();
    const ready: string[] = [];
    const guessed: string[] = [];
    const skipped: Record<string, string> = {};
    const n = this.urls.length;
    for (let i = 0; i < n; i++) {
      const url = this.urls[(start + i) % n] as string;
      const live = [this.out.get(`${url} ${ALL_SCOPES}`), this.out.get(`${url} ${scope}`)].filter(
        (m): m is Mark => m !== undefined && m.until > now,
      );
      const honoured = live.filter((m) => m.honoured).sort((a, b) => b.until - a.until)[0];
      if (live.length === 0) ready.push(url);
      else if (honoured)
        skipped[url] = `${honoured.reason}; kept out for ${((honoured.until - now) / 1000).toFixed(1)} s more`;
      else guessed.push(url);
    }
    return [[...ready, ...guessed], skipped];
  }

  refused(url: string, scope: string, e: Refused): void {
    this.out.set(`${url} ${scope}`, {
      until: performance.now() + e.retryAfter * 1000,
      reason: e.reason,
      honoured: true,
    });
  }

  failed(url: string, reason: string): void {
    this.out.set(`${url} ${ALL_SCOPES}`, { until: performance.now() + FAILED_BACKOFF_MS, reason, honoured: false });
  }

  succeeded(url: string, scope: string): void {
    if (this.out.size > 0) {
      this.out.delete(`${url} ${ALL_SCOPES}`);
      this.out.delete(`${url} ${scope}`);
    }
  }
}

/** The server's `detail` text (idmint answers errors as {"detail": ...}), else the body's start. */
export function detailOf(body: string, statusText: string): string {
  try {
    const data: unknown = JSON.parse(body);
    if (data && typeof data === "object" && "detail" in data) {
      const detail = (data as { detail: unknown }).detail;
      return typeof detail === "string" ? detail : JSON.stringify(detail);
    }
  } catch {
    // not JSON: the body's start
  }
  return body.trim().slice(0, 200) || statusText;
}

/** The longest a Retry-After keeps a replica out, in seconds (a larger value, or a later date, is capped to this). */
export const MAX_RETRY_AFTER_S = 300;

/**
 * Retry-After in seconds: delta-seconds (digits only) or an HTTP date, capped at MAX_RETRY_AFTER_S;
 * DEFAULT_RETRY_AFTER_S when absent, negative or anything else (`-5`, `1.5`, `soon`).
 */
export function retryAfter(headers: Headers): number {
  const value = (headers.get("retry-after") ?? "").trim();
  if (value === "") return DEFAULT_RETRY_AFTER_S;
  if (/^\d+$/.test(value)) return Math.min(Number(value), MAX_RETRY_AFTER_S);
  if (!/[a-z]/i.test(value)) return DEFAULT_RETRY_AFTER_S; // -5, 1.5: numbers, no date
  const at = Date.parse(value);
  return Number.isNaN(at) ? DEFAULT_RETRY_AFTER_S : Math.min(Math.max((at - Date.now()) / 1000, 0), MAX_RETRY_AFTER_S);
}

/**
 * Classify an answer: return for 2xx; throw Refused (503/429), Failed (any other status: a redirect is never
 * followed) or a RequestRejectedError subclass (4xx; a 404 is UnknownSequenceError for sequence calls). Reads the body of an
 * answer it does not accept.
 */
export async function check(response: Response, url: string, sequence: boolean): Promise<void> {
  const status = response.status;
  if (status >= 200 && status < 300) return;
  const body = response.type === "opaqueredirect" ? "" : await readText(response, MAX_ANSWER_BYTES).catch(() => "");
  if (status === 0 || response.type === "opaqueredirect") throw new Failed("redirect (not followed)");
  const detail = detailOf(body, response.statusText);
  if (status === 503 || status === 429) {
    const wait = retryAfter(response.headers);
    throw new Refused(`${status} ${detail} (Retry-After ${wait} s)`, wait);
  }
  if (status === 422) throw new ValidationError(status, detail, url);
  if (status === 404)
    throw sequence ? new UnknownSequenceError(status, detail, url) : new UnknownSchemeError(status, detail, url);
  if (status === 401) throw new UnauthorizedError(status, detail, url);
  if (status === 403) throw new ForbiddenError(status, detail, url);
  if (status >= 400 && status < 500) throw new RequestRejectedError(status, detail, url);
  throw new Failed(`${status} ${detail}`);
}

/** The server's max count when a 422 is about the count range, else 0. */
export function countRange(error: unknown): number {
  if (!(error instanceof ValidationError)) return 0;
  const match = COUNT_RANGE.exec(error.detail);
  return match ? Number(match[1]) : 0;
}

/** Base URLs from a comma-separated string or a list; trailing slashes dropped. Throws for none or a bad one. */
export function normaliseUrls(replicas: string | readonly string[]): string[] {
  const items = typeof replicas === "string" ? replicas.split(",") : replicas.flatMap((r) => r.split(","));
  const urls = items.map((u) => u.trim().replace(/\/+$/, "")).filter((u) => u !== "");
  if (urls.length === 0) throw new TypeError("replicas must name at least one base URL, e.g. 'http://127.0.0.1:8000'");
  for (const url of urls) {
    if (!/^https?:\/\//.test(url)) throw new TypeError(`replica URL must start with http:// or https://, got '${url}'`);
  }
  return urls;
}

/** The longest answer read from any route but the issuing ones (the catalogue, decode, sequences, errors), in bytes. */
export const MAX_ANSWER_BYTES = 16 * 1024 * 1024;

/** Failed: an answer longer than `limit` bytes, refused unread. */
export function tooLong(size: number, limit: number): Failed {
  return new Failed(`answer is longer than the ${limit} bytes it can need (${size} bytes or more): refused unread`);
}

/**
 * The body of `response` as text, unless it is longer than `limit` bytes: then Failed, the rest unread (a declared
 * Content-Length over the limit is refused before a byte is read).
 */
export async function readText(response: Response, limit: number): Promise<string> {
  const declared = Number(response.headers.get("content-length") ?? "");
  if (declared > limit) {
    await response.body?.cancel().catch(() => undefined);
    throw tooLong(declared, limit);
  }
  if (!response.body) return "";
  const reader = response.body.getReader();
  const parts: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      size += value.byteLength;
      if (size > limit) throw tooLong(size, limit);
      parts.push(value);
    }
  } finally {
    reader.cancel().catch(() => undefined);
  }
  const whole = new Uint8Array(size);
  let at = 0;
  for (const part of parts) {
    whole.set(part, at);
    at += part.byteLength;
  }
  return new TextDecoder("utf-8").decode(whole);
}
