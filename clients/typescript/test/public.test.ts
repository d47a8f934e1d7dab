import assert from "node:assert/strict";
import { type IncomingMessage, type Server, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, test } from "node:test";
import { Client, NoReplicaAvailableError, type Revealed, UnknownPublicIdError, ValidationError } from "../src/index.js";

/**
 * An idmint stand-in for public IDs: snowflake's public form (18 characters), a catalogue that (wrongly) lists it
 * as rising, a sequence "s", and /v1/public opening the texts it handed out. Each answer of `answers` is served
 * once, in turn, for the issuing routes (then fresh texts).
 */
const PATTERN = "[0-9A-HJKMNP-TV-Z]{17}[1-9A-F]";
const servers: Server[] = [];
after(() => {
  for (const s of servers) s.close();
});

interface Fake {
  url: string;
  answers: string[][];
  bodies: unknown[];
  keys: boolean;
}

let made = 0;
function fresh(n: number): string[] {
  // falling texts: a rising-order check would refuse them
  return Array.from({ length: n }, () => `${String(99_999_999 - made++).padStart(17, "0")}1`);
}

async function fake(keys = true): Promise<Fake> {
  const f: Fake = { url: "", answers: [], bodies: [], keys };
  const opened = new Map<string, number>();
  const server = createServer((request: IncomingMessage, response: ServerResponse) => {
    const url = new URL(request.url ?? "/", "http://x");
    const chunks: Buffer[] = [];
    request.on("data", (c: Buffer) => chunks.push(c));
    request.on("end", () => {
      if (url.pathname === "/v1/fleet") return response.writeHead(404).end();
      if (url.pathname === "/v1/schemes") {
        return response.end(
          JSON.stringify({
            schemes: [
              {
                name: "snowflake",
                formats: ["decimal"],
                canonical_format: "decimal",
                token_patterns: { decimal: "[0-9]{1,19}", public: PATTERN },
                rising: { decimal: {}, public: {} },
                limits: { max_count: 1000 },
              },
            ],
          }),
        );
      }
      const noKeys = '{"detail": "format=public and /v1/public need public-ID keys: set IDMINT_PUBLIC_ID_KEYS_FILE"}';
      if (!f.keys) return response.writeHead(422).end(noKeys);
      const count = Number(url.searchParams.get("count"));
      const issue = () => {
        const texts = f.answers.shift() ?? fresh(count);
        for (const t of texts) opened.set(t, opened.size + 1);
        return texts;
      };
      const item = (text: string) => {
        const value = opened.get(text);
        if (value === undefined) return { error: "no key in force opens this public ID" };
        return { id: String(value), scheme: "sequence", key_id: 1, decoded: null };
      };
      if (url.pathname === "/v1/ids/snowflake") {
        return response.end(
          JSON.stringify({ scheme: "snowflake", format: url.searchParams.get("format"), ids: issue() }),
        );
      }
      if (url.pathname === "/v1/ids/snowflake/stream") {
        response.setHeader("content-type", "text/plain; charset=us-ascii");
        return response.end(`${issue().join("\n")}\n`);
      }
      if (url.pathname === "/v1/sequences/s/next") return response.end(JSON.stringify({ name: "s", ids: issue() }));
      if (url.pathname.startsWith("/v1/public/")) {
        const got = item(decodeURIComponent(url.pathname.slice("/v1/public/".length)));
        if ("error" in got) return response.writeHead(404).end(`{"detail": "${got.error}"}`);
        return response.end(JSON.stringify({ ...got, error: null }));
      }
      if (url.pathname === "/v1/public" && request.method === "POST") {
        const body = JSON.parse(Buffer.concat(chunks).toString()) as { texts: string[] };
        f.bodies.push(body);
        return response.end(JSON.stringify({ items: body.texts.map(item) }));
      }
      response.writeHead(404).end('{"detail": "unknown"}');
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  servers.push(server);
  f.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return f;
}

test("format public is passed through and never checked for order; reveal reads the texts back", async () => {
  const f = await fake();
  const client = new Client(f.url);
  const batch = await client.ids("snowflake", 50, { format: "public" });
  assert.equal(batch.length, 50);
  assert.notDeepEqual(batch, [...batch].sort());
  const one = await client.newId("snowflake", { format: "public" });
  const texts = await client.next("s", 5, { format: "public" });
  assert.equal(texts.length, 5);
  const items = await client.revealMany([...batch, one, ...texts, "000000000000000001"]);
  assert.equal(items.length, 57);
  assert.deepEqual(items[56], { text: "000000000000000001", error: "no key in force opens this public ID" });
  const first = items[0] as Revealed;
  assert.deepEqual(first, { text: batch[0], id: first.id, scheme: "sequence", keyId: 1, decoded: null });
  assert.deepEqual(await client.reveal(batch[0] as string), first);
  await assert.rejects(client.reveal("000000000000000001"), (e: unknown) => {
    assert.ok(e instanceof UnknownPublicIdError && e.status === 404, String(e));
    return true;
  });
  assert.deepEqual(await client.revealMany([]), []);
  client.close();
});

test("a public text twice fails its server, in a batch and in a sequence's next", async () => {
  const f = await fake();
  const [a, b] = fresh(2) as [string, string];
  f.answers = [[a, b, a], [a, b], [b], [a, a]];
  const client = new Client(f.url);
  await assert.rejects(client.ids("snowflake", 3, { format: "public" }), /twice/);
  assert.deepEqual(await client.ids("snowflake", 2, { format: "public" }), [a, b]);
  await assert.rejects(client.ids("snowflake", 1, { format: "public" }), /received before/);
  await assert.rejects(client.next("s", 2, { format: "public" }), NoReplicaAvailableError);
  f.answers = [["12"]];
  await assert.rejects(client.next("s", 1, { format: "public" }), /not a sequence integer's public text/);
  client.close();
});

test("revealMany splits above 10,000 texts; without keys the server's 422 is a ValidationError", async () => {
  const f = await fake();
  const client = new Client(f.url);
  const items = await client.revealMany(Array.from({ length: 12_000 }, (_, i) => String(i)));
  assert.equal(items.length, 12_000);
  assert.deepEqual(
    f.bodies.map((b) => (b as { texts: string[] }).texts.length),
    [10_000, 2_000],
  );
  client.close();
  const bare = new Client((await fake(false)).url);
  await assert.rejects(bare.ids("snowflake", 1, { format: "public" }), (e: unknown) => {
    assert.ok(e instanceof ValidationError && e.detail.includes("IDMINT_PUBLIC_ID_KEYS_FILE"), String(e));
    return true;
  });
  await assert.rejects(bare.reveal("x"), ValidationError);
  bare.close();
});
