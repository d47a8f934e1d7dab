import { FleetOverlapError, SequenceStoresDifferError } from "./errors.js";

/**
 * The fleet check: before a client uses a server it reads the server's GET /v1/fleet ({"fleet_id", "member",
 * "region", "regions", "schemes": {name: {"kind", "pool", "group", "group_in_id"}}}), and again every
 * FLEET_RECHECK_MS. Servers of one fleet (the same fleet_id, each confirming the other's member token through GET
 * /v1/fleet/members/{token}) are one ID space. Servers of two fleets are fine when every identity pool they share a
 * scheme in is disjoint, and a FleetOverlapError otherwise. A server without the route (404: an idmint from before
 * fleets) is used as before and asked again after NOT_SERVED_RECHECK_MS. The overlap rule is the server's
 * (app/fleet.py, overlap).
 */

export const FLEET_RECHECK_MS = 60_000;
export const NOT_SERVED_RECHECK_MS = 10_000;
const UUID = /^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$/;

interface FleetScheme {
  kind?: string;
  pool: [number, number];
  group?: unknown;
  group_in_id?: boolean;
}

export interface FleetDoc {
  fleet_id: string;
  member?: string;
  region?: unknown;
  regions?: unknown;
  schemes: Record<string, FleetScheme>;
}

/** The fleet document of a 200 answer's body; throws Error for anything else (the caller fails the server over). */
export function parseFleet(body: unknown): FleetDoc {
  const doc = body as FleetDoc;
  if (!doc || typeof doc !== "object" || typeof doc.fleet_id !== "string" || !UUID.test(doc.fleet_id)) {
    throw new Error("not a /v1/fleet document with a fleet ID");
  }
  for (const [name, entry] of Object.entries(doc.schemes ?? {})) {
    const pool = entry?.pool;
    if (!Array.isArray(pool) || !Number.isInteger(pool[0]) || !Number.isInteger(pool[1])) {
      throw new Error(`not a /v1/fleet document with a fleet ID (pool bounds of ${name} must be integers)`);
    }
  }
  doc.schemes = doc.schemes ?? {};
  return doc;
}

function overlap(a: FleetScheme, b: FleetScheme): boolean {
  if (JSON.stringify(a.group ?? null) !== JSON.stringify(b.group ?? null)) return !(a.group_in_id && b.group_in_id);
  return a.pool[0] <= b.pool[1] && b.pool[0] <= a.pool[1];
}

export class FleetCheck {
  /** Base URL -> its fleet document, or null (no /v1/fleet). */
  readonly docs = new Map<string, FleetDoc | null>();
  private readonly readAt = new Map<string, number>();

  unread(urls: readonly string[]): string[] {
    const now = performance.now();
    return urls.filter((url) => {
      if (!this.docs.has(url)) return true;
      const ttl = this.docs.get(url) === null ? NOT_SERVED_RECHECK_MS : FLEET_RECHECK_MS;
      return now - (this.readAt.get(url) ?? 0) >= ttl;
    });
  }

  /**
   * Record `url`'s fleet (null: 404); throws FleetOverlapError when it overlaps a fleet read before. `live(other)` asks
   * `other` whether this fleet's member token is live in its backend (null: it cannot tell).
   */
  async learn(url: string, doc: FleetDoc | null, live: (other: string) => Promise<boolean | null>): Promise<void> {
    this.docs.delete(url);
    if (doc !== null) {
      for (const [otherUrl, other] of this.docs) {
        if (other === null) continue;
        if (other.fleet_id === doc.fleet_id) {
          if (!doc.member) continue;
          if ((await live(otherUrl)) !== false) continue; // one fleet (or the server cannot tell now)
        }
        for (const [scheme, entry] of Object.entries(doc.schemes)) {
          const theirs = other.schemes[scheme];
          if (theirs && overlap(entry, theirs)) {
            throw new FleetOverlapError(
              `${url} (fleet ${doc.fleet_id}, region ${doc.region} of ${doc.regions}) and ${otherUrl} (fleet ` +
                `${other.fleet_id}, region ${other.region} of ${other.regions}) are two fleets whose ${scheme} ` +
                `identities overlap (${entry.kind} ${entry.pool[0]}..${entry.pool[1]} and ${theirs.pool[0]}..` +
                `${theirs.pool[1]}): IDs from both could repeat; give each fleet its own IDMINT_REGION, or use ` +
                "servers of one fleet",
              [url, otherUrl],
              scheme,
            );
          }
        }
      }
    }
    this.docs.set(url, doc);
    this.readAt.set(url, performance.now());
  }

  /** Throws SequenceStoresDifferError unless every server of `urls` read so far is of one fleet. */
  checkOneFleet(urls: readonly string[]): void {
    if (urls.length < 2) return;
    let firstUrl: string | null = null;
    let firstFleet: string | null = null;
    for (const url of urls) {
      if (!this.docs.has(url)) continue;
      const doc = this.docs.get(url);
      if (!doc) throw new SequenceStoresDifferError([url, null], [null, null]);
      if (firstUrl === null) {
        firstUrl = url;
        firstFleet = doc.fleet_id;
      } else if (doc.fleet_id !== firstFleet) {
        throw new SequenceStoresDifferError([firstUrl, url], [firstFleet, doc.fleet_id]);
      }
    }
  }
}
