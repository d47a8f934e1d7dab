import assert from "node:assert/strict";
import { type IncomingMessage, type Server, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, test } from "node:test";
import {
  CallAbortedError,
  Client,
  ClientClosedError,
  MAX_SEQUENCE_VALUE,
  NoReplicaAvailableError,
  UnauthorizedError,
  UnknownSchemeError,
  UnknownSequenceError,
  ValidationError,
} from "../src/index.js";

/** An idmint stand-in: one scheme ("wiji", IDs "W" + 25 digits), a sequence "s", and a fault switch. */
let issued = 0; // one ID space for every fake: two fakes never issue one ID

interface Fake {
  url: string;
  requests: number;
  mode: "" | "refuse" | "repeat" | "replay" | "redirect" | "unauthorized" | "html" | "silent";
  server: Server;
}

const fakes: Fake[] = [];
after(() => {
  for (const fake of fakes) fake.server.close();
});

function ids(n: number): string[] {
  const first = issued;
  issued += n;
  return Array.from({ length: n }, (_, i) => `W${String(first + i).padStart(25, "0")}`);
}

async function fake(): Promise<Fake> {
  let sequence = MAX_SEQUENCE_VALUE - 1_000_000n;
  const cached = new Map<string, string>();
  const f = { url: "", requests: 0, mode: "", server: null as unknown as Server } as Fake;
  f.server = createServer((request: IncomingMessage, response: ServerResponse) => {
    const url = new URL(request.url ?? "/", "http://x");
    if (url.pathname === "/v1/fleet") return response.writeHead(404).end();
    if (url.pathname === "/v1/schemes") {
      return response.end(
        JSON.stringify({
          schemes: [
            {
              name: "wiji",
              formats: ["base32"],
              canonical_format: "base32",
              token_patterns: { base32: "W[0-9]{25}" },
              limits: { max_count: 1000 },
            },
          ],
        }),
      );
    }
    f.requests++;
    if (f.mode === "silent") return; // accepts, never answers
    if (f.mode === "refuse") return response.writeHead(503, { "retry-after": "30" }).end('{"detail": "not ready"}');
    if (f.mode === "redirect") return response.writeHead(307, { location: "http://127.0.0.1:1/elsewhere" }).end();
    if (f.mode === "unauthorized") return response.writeHead(401).end('{"detail": "API key not accepted"}');
    if (f.mode === "html") return response.writeHead(200, { "content-type": "text/html" }).end("<!doctype html>");
    const count = Number(url.searchParams.get("count"));
    let body: string;
    if (url.pathname === "/v1/sequences/s/next") {
      const values = Array.from({ length: count }, (_, i) => String(sequence + BigInt(i)));
      sequence += BigInt(count);
      body = JSON.stringify({ name: "s", ids: values });
    } else if (url.pathname.startsWith("/v1/sequences/")) {
      return response.writeHead(404).end(`{"detail": "no sequence named 'nope'"}`);
    } else if (url.pathname === "/v1/ids/wiji") {
      if (!(count >= 1 && count <= 1000)) return response.writeHead(422).end('{"detail": "count must be in 1..1000"}');
      const got = ids(count);
      if (f.mode === "repeat" && count > 1) got[count - 1] = got[0] as string;
      body = JSON.stringify({ scheme: "wiji", format: "base32", ids: got });
    } else if (url.pathname === "/v1/ids/wiji/stream") {
      response.setHeader("content-type", "text/plain; charset=us-ascii");
      body = `${ids(count).join("\n")}\n`;
    } else {
      return response.writeHead(404).end('{"detail": "unknown scheme"}');
    }
    if (f.mode === "replay") {
      body = cached.get(request.url ?? "") ?? body;
      cached.set(request.url ?? "", body);
    }
    response.end(body);
  });
  await new Promise<void>((resolve) => f.server.listen(0, "127.0.0.1", resolve));
  f.url = `http://127.0.0.1:${(f.server.address() as AddressInfo).port}`;
  fakes.push(f);
  return f;
}

test("ids() splits above the max count; stream() yields the count asked for", async () => {
  const f = await fake();
  const client = new Client(f.url);
  assert.equal((await client.ids("wiji", 2500)).length, 2500);
  assert.equal(f.requests, 3);
  let n = 0;
  for await (const _ of client.stream("wiji", 10_000)) n++;
  assert.equal(n, 10_000);
  client.close();
});

test("newId() from concurrent tasks never hands out one ID twice", async () => {
  const f = await fake();
  const client = new Client([f.url]);
  const got = await Promise.all(Array.from({ length: 20_000 }, () => client.newId("wiji")));
  assert.equal(new Set(got).size, 20_000);
  assert.ok(f.requests < 200, `${f.requests} requests for 20,000 buffered IDs`);
  client.close();
});

test("maxAgeMs discards stale buffered IDs", async () => {
  const f = await fake();
  const client = new Client(f.url, { maxAgeMs: 100 });
  const first = await client.newId("wiji");
  await new Promise((resolve) => setTimeout(resolve, 150));
  const before = f.requests;
  assert.notEqual(await client.newId("wiji"), first);
  assert.ok(f.requests > before);
  client.close();
});

test("rejections are typed and not retried; a closed client throws ClientClosedError", async () => {
  const a = await fake();
  const b = await fake();
  const client = new Client([a.url, b.url], { apiKey: "k" });
  await assert.rejects(client.ids("wiji", 0), (e: unknown) => e instanceof ValidationError && e.status === 422);
  await assert.rejects(client.ids("nope", 1), UnknownSchemeError);
  const alone = new Client(a.url);
  await assert.rejects(
    alone.next("nope"),
    (e: unknown) => e instanceof UnknownSequenceError && !(e instanceof UnknownSchemeError),
  );
  a.mode = "unauthorized";
  b.mode = "unauthorized";
  const before = a.requests + b.requests;
  await assert.rejects(client.ids("wiji", 1), UnauthorizedError);
  assert.equal(a.requests + b.requests, before + 1);
  client.close();
  await assert.rejects(client.newId("wiji"), ClientClosedError);
  alone.close();
});

test("failover honours Retry-After and names every replica", async () => {
  const a = await fake();
  const b = await fake();
  a.mode = "refuse";
  const client = new Client([a.url, b.url]);
  for (let i = 0; i < 6; i++) await client.ids("wiji", 1);
  assert.equal(a.requests, 1);
  assert.equal(b.requests, 6);
  b.mode = "html";
  await assert.rejects(client.ids("wiji", 1), (e: unknown) => {
    assert.ok(e instanceof NoReplicaAvailableError);
    assert.match(e.reasons[a.url] ?? "", /kept out/);
    assert.match(e.reasons[b.url] ?? "", /unreadable/);
    return true;
  });
  client.close();
});

for (const [mode, words] of [
  ["repeat", /twice/],
  ["replay", /received before/],
  ["redirect", /307/],
] as const) {
  test(`a ${mode}ing server fails over; nothing is handed out twice`, async () => {
    const a = await fake();
    const b = await fake();
    a.mode = mode;
    const client = new Client([a.url, b.url]);
    const seen = new Set<string>();
    for (let i = 0; i < 10; i++) for (const id of await client.ids("wiji", 5)) seen.add(id);
    assert.equal(seen.size, 50);
    const alone = new Client(a.url);
    if (mode === "replay") await alone.ids("wiji", 5); // the cache's answer, new to this client
    await assert.rejects(
      alone.ids("wiji", 5),
      (e: unknown) => e instanceof NoReplicaAvailableError && words.test(e.reasons[a.url] ?? ""),
    );
    client.close();
    alone.close();
  });
}

test("sequence integers above 2**53 are exact bigints", async () => {
  const f = await fake();
  const client = new Client(f.url);
  const values = await client.next("s", 3);
  assert.deepEqual(values, [
    MAX_SEQUENCE_VALUE - 1_000_000n,
    MAX_SEQUENCE_VALUE - 999_999n,
    MAX_SEQUENCE_VALUE - 999_998n,
  ]);
  client.close();
});

test("a call's own AbortSignal aborts it: CallAbortedError, its cause the signal's reason", async () => {
  const f = await fake();
  const client = new Client(f.url, { timeoutMs: 60_000 });
  await client.schemes();
  f.mode = "silent";
  const started = performance.now();
  const error = await client.ids("wiji", 3, { signal: AbortSignal.timeout(200) }).catch((e: unknown) => e);
  assert.ok(error instanceof CallAbortedError, String(error));
  assert.equal((error.cause as Error).name, "TimeoutError");
  assert.ok(performance.now() - started < 30_000);
  const aborted = new AbortController();
  aborted.abort(new Error("the user left"));
  for (const call of [
    () => client.ids("wiji", 1, { signal: aborted.signal }),
    () => client.newId("wiji", { signal: aborted.signal }),
    () => client.decode("x", "wiji", { signal: aborted.signal }),
    () => client.schemes({ signal: aborted.signal }),
    () => client.next("s", 1, { signal: aborted.signal }),
    () => client.range("s", 1, { signal: aborted.signal }),
  ]) {
    await assert.rejects(call(), CallAbortedError);
  }
  await assert.rejects(async () => {
    for await (const _ of client.stream("wiji", 3, { signal: aborted.signal })) {
      // nothing
    }
  }, CallAbortedError);
  client.close();
});
