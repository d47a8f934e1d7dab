/** One ID read as one scheme (GET /v1/decode/{scheme}/{id}). */
export interface Decoded {
  scheme: string;
  /** The canonical text form. */
  id: string;
  /** The packed bytes in lowercase hex. */
  hex: string;
  /** Creation time as the server's RFC 3339 UTC text (null when the scheme has no time). */
  timestamp: string | null;
  /** The scheme's own fields by name (timestamp_ms, generator_id, sequence... see /v1/schemes). */
  fields: Record<string, unknown>;
}

/** Every scheme whose parser accepts `input` (GET /v1/decode/{id}), the plausible readings first. */
export interface Candidates {
  input: string;
  candidates: Decoded[];
  /** The first (most plausible) reading. */
  best: Decoded;
}

/** One scheme of GET /v1/schemes. */
export interface SchemeInfo {
  name: string;
  /** Text forms, the first canonical. */
  formats: string[];
  canonicalFormat: string;
  /** The largest count of one batch request. */
  maxCount: number | null;
  maxStreamCount: number | null;
  /** What the answering replica holds (identities...). */
  node: Record<string, unknown>;
  /** Per text form, the regex every ID of that form matches whole. */
  tokenPatterns: Record<string, string>;
  /** The whole JSON entry. */
  raw: Record<string, unknown>;
}

/** A contiguous range reserved for the caller (POST /v1/sequences/{name}/range): first..last inclusive. */
export interface SequenceRange {
  name: string;
  first: bigint;
  last: bigint;
  count: bigint;
}

/** The text form and scheme options of an issuing call. */
export interface IssueOptions {
  /** "decimal", "hex", "uuid"... as listed by schemes() (default: canonical); "public": public IDs (docs/public-ids.md). */
  format?: string;
  /** Scheme options: eight-byte `mode`, siq or typeid `type`, hlc-ulid `after`. */
  options?: Record<string, string>;
  /** Aborts this call: it throws CallAbortedError (its `cause`: the signal's reason), nothing of it handed out. */
  signal?: AbortSignal;
}

/** The options of a call that takes no issue options. */
export interface CallOptions {
  /** Aborts this call: it throws CallAbortedError (its `cause`: the signal's reason). */
  signal?: AbortSignal;
}

/**
 * A public ID read back (GET /v1/public/{text}, an item of POST /v1/public): `id` is the internal ID in its
 * scheme's canonical form (a sequence integer's decimal digits), `scheme` its scheme or "sequence", `keyId` the key
 * (1..15) that opened it, `decoded` its decode reading (null for a sequence integer).
 */
export interface Revealed {
  text: string;
  id: string;
  scheme: string;
  keyId: number;
  decoded: Decoded | null;
}

/** An item of revealMany() that no key in force opens: `error` says why. */
export interface Unrevealed {
  text: string;
  error: string;
}

/** The options of a sequence's next() in the public form: the integers' public texts (docs/public-ids.md). */
export interface PublicNextOptions extends CallOptions {
  format: "public";
}
