/**
 * The conformance runner of the TypeScript client: one JSON command a line in on stdin, one JSON result a line out
 * on stdout, as clients/conformance/README.md describes (the protocol all runners share).
 */

import { createInterface } from "node:readline";
import {
  Client,
  type Decoded,
  IdmintClientError,
  type IssueOptions,
  NoReplicaAvailableError,
  RequestRejectedError,
  type Revealed,
  type Unrevealed,
} from "../src/index.js";

interface Command {
  op: string;
  replicas?: string[];
  timeout?: number;
  max_age?: number | null;
  buffer?: boolean;
  api_key?: string;
  min_refill?: number;
  max_refill?: number;
  scheme?: string;
  count?: number;
  format?: string;
  options?: Record<string, string>;
  id?: string;
  name?: string;
  text?: string;
  texts?: string[];
}

type Result = Record<string, unknown>;

function errorResult(error: unknown, ids?: string[]): Result {
  if (!(error instanceof IdmintClientError)) throw error;
  // The class caught (the driver checks it against the case's error kind) and its data.
  const out: Result = { ok: false, class: error.constructor.name, message: error.message };
  if (error instanceof NoReplicaAvailableError) {
    out.reasons = error.reasons;
    out.delivered = error.delivered;
  }
  if (error instanceof RequestRejectedError) out.status = error.status;
  if (ids !== undefined) out.ids = ids;
  return out;
}

function decoded(d: Decoded): Result {
  return { scheme: d.scheme, id: d.id, hex: d.hex, timestamp: d.timestamp, fields: d.fields };
}

function revealed(item: Revealed | Unrevealed): Result {
  if ("error" in item) return { text: item.text, error: item.error };
  const reading = item.decoded === null ? null : decoded(item.decoded);
  return { text: item.text, id: item.id, scheme: item.scheme, key_id: item.keyId, decoded: reading };
}

let client: Client | null = null;

async function run(cmd: Command): Promise<Result> {
  if (cmd.op === "client") {
    client?.close();
    client = new Client(cmd.replicas ?? [], {
      timeoutMs: (cmd.timeout ?? 10) * 1000,
      maxAgeMs: cmd.max_age === null ? null : (cmd.max_age ?? 1) * 1000,
      buffer: cmd.buffer ?? true,
      minRefill: cmd.min_refill ?? 64,
      maxRefill: cmd.max_refill ?? 100_000,
      ...(cmd.api_key === undefined ? {} : { apiKey: cmd.api_key }),
    });
    return { ok: true };
  }
  const c = client as Client;
  const is: IssueOptions = {};
  if (cmd.format !== undefined) is.format = cmd.format;
  if (cmd.options !== undefined) is.options = cmd.options;
  const scheme = cmd.scheme ?? "";
  const count = cmd.count ?? 1;
  const got: string[] = [];
  try {
    switch (cmd.op) {
      case "ids":
        return { ok: true, ids: await c.ids(scheme, count, is) };
      case "stream":
        for await (const id of c.stream(scheme, count, is)) got.push(id);
        return { ok: true, ids: got };
      case "new_ids":
        for (let i = 0; i < count; i++) got.push(await c.newId(scheme, cmd.format || cmd.options ? is : undefined));
        return { ok: true, ids: got };
      case "decode":
        if (cmd.scheme) return { ok: true, decoded: decoded(await c.decode(cmd.id ?? "", cmd.scheme)) };
        return { ok: true, candidates: (await c.decode(cmd.id ?? "")).candidates.map(decoded) };
      case "schemes":
        return { ok: true, schemes: (await c.schemes()).map((s) => ({ name: s.name, formats: s.formats })) };
      case "next":
        if (cmd.format === "public")
          return { ok: true, values: await c.next(cmd.name ?? "", count, { format: "public" }) };
        return { ok: true, values: (await c.next(cmd.name ?? "", count)).map(String) };
      case "reveal":
        return { ok: true, revealed: revealed(await c.reveal(cmd.text ?? "")) };
      case "reveal_many":
        return { ok: true, items: (await c.revealMany(cmd.texts ?? [])).map(revealed) };
      case "range": {
        const block = await c.range(cmd.name ?? "", count);
        return { ok: true, first: String(block.first), last: String(block.last), count: String(block.count) };
      }
      case "close":
        c.close();
        return { ok: true };
    }
  } catch (error) {
    return errorResult(error, cmd.op === "stream" || cmd.op === "new_ids" ? got : undefined);
  }
  return { ok: false, error: "unknown_op", message: `unknown op '${cmd.op}'` };
}

const lines = createInterface({ input: process.stdin, crlfDelay: Number.POSITIVE_INFINITY });
for await (const line of lines) {
  if (!line.trim()) continue;
  let result: Result;
  try {
    result = await run(JSON.parse(line) as Command);
  } catch (error) {
    result = { ok: false, error: "runner_crashed", message: String(error) };
  }
  process.stdout.write(`${JSON.stringify(result)}\n`);
}
(client as Client | null)?.close();
