import { Failed } from "./errors.js";
import { IdentityOrder, type Rule } from "./repeats.js";

/**
 * What an ID looks like: each scheme's token pattern per text form, from GET /v1/schemes (`token_patterns`).
 * Every answer is checked against it before any of it is handed out (a batch whole, a stream chunk by chunk of
 * complete lines), so "", null, numbers or an HTML page from a server or a proxy fail that server, never become IDs.
 */

const SHOWN_CHARS = 80;

export function shown(text: string): string {
  return `'${text.slice(0, SHOWN_CHARS)}'`;
}

export class IdShape {
  private one: RegExp | null = null;
  private lines: RegExp | null = null;
  readonly missing: string | null = null;
  readonly order: IdentityOrder | null;
  private readonly orderNeeds: Record<string, string[]>;

  constructor(
    readonly scheme: string,
    readonly format: string,
    pattern: string | undefined,
    /** `/v1/schemes`' `rising` entry of this form: the options (and values) under which one answer rises. */
    readonly rising?: Record<string, string[]>,
    /** `/v1/schemes`' `rising_per_identity` entry of this form: how its IDs read as integers and name their issuer. */
    perIdentity?: unknown,
    /** The most characters an ID of this form has (`/v1/schemes`' `max_lengths`): answers are bounded by it. */
    readonly longest = 4096,
  ) {
    this.order = IdentityOrder.from(perIdentity);
    const needs =
      perIdentity && typeof perIdentity === "object" ? (perIdentity as { needs?: unknown }).needs : undefined;
    this.orderNeeds = needs === undefined ? {} : (needs as Record<string, string[]>);
    if (pattern === undefined) {
      this.missing = `/v1/schemes gives no token pattern for ${scheme} in format '${format}': its answers cannot be checked`;
      return;
    }
    try {
      this.one = new RegExp(`^(?:${pattern})$`);
      this.lines = new RegExp(`^(?:${pattern})(?:\\n(?:${pattern}))*$`);
    } catch (error) {
      this.missing = `/v1/schemes gives a token pattern for ${scheme} in format '${format}' that is no regex: ${error}`;
    }
  }

  /** Whether one answer's IDs must strictly rise under `options` (the form is rising and they name what it needs). */
  rises(options: Record<string, unknown> | undefined): boolean {
    return satisfied(this.rising, options);
  }

  /**
   * What an answer under `options` is checked for: rising within it (`rises`), and rising per issuing identity
   * across answers when the form is in `rising_per_identity` and `options` name what it needs.
   */
  rule(options: Record<string, unknown> | undefined): Rule {
    const order = this.order && satisfied(this.orderNeeds, options) ? this.order : null;
    return { scheme: this.scheme, rising: this.rises(options), order };
  }

  /** Complete lines joined by \n (no final newline), the first being line `first` of the answer. */
  checkText(text: string, lines: string[], first: number): void {
    if (this.missing !== null || !this.one || !this.lines) throw new Failed(this.missing ?? "no pattern");
    if (this.lines.test(text)) return;
    lines.forEach((line, i) => {
      if (!this.one?.test(line)) {
        throw new Failed(`line ${first + i} is not a ${this.scheme} ID (${this.format}): ${shown(line)}`);
      }
    });
  }

  /** The `ids` of a batch answer: every one a string of the pattern. */
  checkIds(ids: unknown[]): string[] {
    if (this.missing !== null || !this.one) throw new Failed(this.missing ?? "no pattern");
    ids.forEach((id, i) => {
      if (typeof id !== "string" || id.includes("\n") || !this.one?.test(id)) {
        throw new Failed(`ID ${i + 1} is not a ${this.scheme} ID (${this.format}): ${shown(String(id))}`);
      }
    });
    return ids as string[];
  }
}

function satisfied(needs: Record<string, string[]> | undefined, options: Record<string, unknown> | undefined): boolean {
  if (!needs || typeof needs !== "object") return false;
  return Object.entries(needs).every(
    ([name, values]) =>
      Array.isArray(values) && options?.[name] !== undefined && values.includes(String(options[name])),
  );
}
