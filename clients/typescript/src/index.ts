/**
 * idmint-client: IDs from an idmint fleet at in-process speed, with failover, streams, decode and exact sequence
 * integers. ES modules, no runtime dependencies beyond the platform's fetch (Node 18+, browsers where CORS allows).
 *
 * ```ts
 * import { Client } from "idmint-client";
 *
 * const ids = new Client(["http://idmint-1:8000", "http://idmint-2:8000"]);
 * const orderId = await ids.newId("hlc-ulid");            // from a local buffer, refilled in the background
 * const batch = await ids.ids("wiji", 250_000);            // split above the server's max count
 * for await (const id of ids.stream("wiji", 10_000_000)) { ... }  // flat memory, carries on from another replica
 * const invoiceNumbers = await ids.next("invoices", 3);    // bigint[], rising, never twice
 * const shown = await ids.newId("uuidv7", { format: "public" });  // a keyed public ID (docs/public-ids.md)
 * const internal = (await ids.reveal(shown)).id;           // the UUIDv7 behind it
 * ids.close();
 * ```
 */

export {
  Client,
  type ClientOptions,
  DEFAULT_MAX_AGE_MS,
  DEFAULT_MAX_REFILL,
  DEFAULT_MIN_REFILL,
  DEFAULT_TIMEOUT_MS,
  MAX_SEQUENCE_VALUE,
} from "./client.js";
export {
  CallAbortedError,
  ClientClosedError,
  FleetOverlapError,
  ForbiddenError,
  IdmintClientError,
  NoReplicaAvailableError,
  RequestRejectedError,
  SequenceStoresDifferError,
  UnauthorizedError,
  UnknownPublicIdError,
  UnknownSchemeError,
  UnknownSequenceError,
  ValidationError,
  // The earlier names (deprecated).
  BadRequest,
  CallAborted,
  ClientClosed,
  FleetOverlap,
  IdmintError,
  NoReplicaAvailable,
  RequestRejected,
  SequenceStoresDiffer,
  Unauthorized,
  UnknownScheme,
  UnknownSequence,
} from "./errors.js";
export type {
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

export const VERSION = "0.1.0";
