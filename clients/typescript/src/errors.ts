/**
 * The error classes of the idmint client, one tree (catch `IdmintClientError` and nothing else):
 *
 * ```
 * IdmintClientError
 * ├── RequestRejectedError       4xx (not 429): status, detail, url; never retried on another replica
 * │   ├── ValidationError        422: the rule broken (count range, option, format, ID)
 * │   ├── UnauthorizedError      401: the API key is missing or matches none
 * │   ├── ForbiddenError         403: the API key lacks the route's scope
 * │   ├── UnknownSchemeError     404 to an ID or decode call
 * │   ├── UnknownSequenceError   404 to a sequence call: no sequence of that name
 * │   └── UnknownPublicIdError   404 to reveal(): no public-ID key in force opens the text
 * ├── NoReplicaAvailableError    every replica refused (503/429 + Retry-After) or failed (unreachable, 5xx, a
 * │                              redirect, a broken, truncated or repeating answer); reasons: {url: reason};
 * │                              delivered (streams)
 * ├── FleetOverlapError          servers of two fleets whose identities overlap: IDs from both could repeat
 * ├── SequenceStoresDifferError  a sequence call with servers of two fleets (each keeps its own sequences)
 * ├── ClientClosedError
 * └── CallAbortedError           the call's own AbortSignal aborted it
 * ```
 *
 * The Python and Go clients name each alike (docs/clients.md, "Errors").
 */

export class IdmintClientError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** A replica rejected the request itself (HTTP 4xx other than 429): asking another replica would not help. */
export class RequestRejectedError extends IdmintClientError {
  constructor(
    readonly status: number,
    readonly detail: string,
    readonly url: string,
  ) {
    super(`${status} from ${url}: ${detail}`);
  }
}

/** HTTP 422: a count, format, option or ID breaks a rule; `detail` names it. */
export class ValidationError extends RequestRejectedError {}

/** HTTP 404 to an ID or decode call: the server has no scheme of that name. */
export class UnknownSchemeError extends RequestRejectedError {}

/** HTTP 404 to a sequence call: the fleet has no sequence of that name (create it first: POST /v1/sequences). */
export class UnknownSequenceError extends RequestRejectedError {}

/**
 * HTTP 404 to reveal(): no public-ID key in force on the server opens the text (not a public ID of this fleet, a
 * mistyped one, or one of a key removed since).
 */
export class UnknownPublicIdError extends RequestRejectedError {}

/** HTTP 401: the API key is missing or matches none. */
export class UnauthorizedError extends RequestRejectedError {}

/** HTTP 403: the API key is valid but lacks the scope of the route called. */
export class ForbiddenError extends RequestRejectedError {}

/**
 * Every replica refused or failed; nothing was issued by this call (a stream: see `delivered`). `reasons` maps
 * each replica's base URL to why it was not used.
 */
export class NoReplicaAvailableError extends IdmintClientError {
  constructor(
    what: string,
    readonly reasons: Record<string, string>,
    readonly delivered = 0,
  ) {
    const listed = Object.entries(reasons)
      .map(([url, reason]) => `${url}: ${reason}`)
      .join("; ");
    super(`${what}: no replica available (${listed})`);
  }
}

/** Two servers belong to different fleets whose identity pools overlap for `scheme` (both could issue one ID). */
export class FleetOverlapError extends IdmintClientError {
  constructor(
    message: string,
    readonly urls: [string, string],
    readonly scheme: string,
  ) {
    super(message);
  }
}

/** A sequence call on servers that do not share one fleet's storage (their integers would repeat). */
export class SequenceStoresDifferError extends IdmintClientError {
  constructor(
    readonly urls: [string, string | null],
    readonly fleets: [string | null, string | null],
  ) {
    super(
      urls[1] === null
        ? `${urls[0]} does not tell its fleet (no /v1/fleet): with several servers, sequence integers from it and ` +
            "the others could repeat; use servers that tell their fleet"
        : `${urls[0]} (fleet ${fleets[0]}) and ${urls[1]} (fleet ${fleets[1]}) keep separate sequences: their ` +
            "integers would repeat; use servers of one fleet for sequences",
    );
  }
}

/** The client was closed; create a new one. */
export class ClientClosedError extends IdmintClientError {}

/** The caller's own AbortSignal aborted the call (`cause`: the signal's reason, e.g. a TimeoutError). */
export class CallAbortedError extends IdmintClientError {
  constructor(readonly reason: unknown) {
    super(`call aborted by its signal: ${reason instanceof Error ? reason.message : String(reason)}`);
    this.name = "CallAbortedError";
    (this as { cause?: unknown }).cause = reason;
  }
}

/** @deprecated The earlier name of IdmintClientError. */
export const IdmintError = IdmintClientError;
/** @deprecated The earlier name of ValidationError (HTTP 422). */
export const BadRequest = ValidationError;
/** @deprecated The earlier name of UnknownSchemeError. */
export const UnknownScheme = UnknownSchemeError;
/** @deprecated The earlier name of UnknownSequenceError. */
export const UnknownSequence = UnknownSequenceError;
/** @deprecated 401 and 403 were one class: now UnauthorizedError (401) and ForbiddenError (403). */
export const Unauthorized = UnauthorizedError;
/** @deprecated The earlier name of RequestRejectedError. */
export const RequestRejected = RequestRejectedError;
/** @deprecated The earlier name of NoReplicaAvailableError. */
export const NoReplicaAvailable = NoReplicaAvailableError;
/** @deprecated The earlier name of FleetOverlapError. */
export const FleetOverlap = FleetOverlapError;
/** @deprecated The earlier name of SequenceStoresDifferError. */
export const SequenceStoresDiffer = SequenceStoresDifferError;
/** @deprecated The earlier name of ClientClosedError. */
export const ClientClosed = ClientClosedError;
/** @deprecated The earlier name of CallAbortedError. */
export const CallAborted = CallAbortedError;

/** Internal: this replica refused (503/429); keep it out for `retryAfter` seconds. */
export class Refused extends Error {
  constructor(
    readonly reason: string,
    readonly retryAfter: number,
  ) {
    super(reason);
  }
}

/** Internal: this replica failed (unreachable, 5xx, a redirect, a broken answer); move on. */
export class Failed extends Error {
  constructor(readonly reason: string) {
    super(reason);
  }
}
