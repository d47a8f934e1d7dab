/**
 * Measures the TypeScript client against one idmint server for bench/bench_clients.py: "buffered" (newId with
 * refills, for a number of seconds), "hot" (newId from a full buffer: bursts of HOT_BURST draws, each from a new
 * client whose first draw fetched 100,000 IDs; only the draws are timed) or "single" (one request per ID: buffer
 * off). Prints one JSON line: {"client": "typescript", "mode", "ids", "seconds", "rate"}.
 *
 *   node build/bench/bench.js URL SCHEME MODE SECONDS
 */

import { Client } from "../src/index.js";

const [url = "http://127.0.0.1:8000", scheme = "wiji", mode = "buffered", seconds = "5"] = process.argv.slice(2);
const HOT_BURST = 40_000;
const HOT_REFILL = 100_000;
const client = new Client(url, { buffer: mode !== "single" });
const step = mode === "single" ? 10 : 1000;

if (mode === "hot") {
  let timed = 0;
  let count = 0;
  while (timed < Number(seconds) * 1000) {
    const fresh = new Client(url, { maxAgeMs: null, minRefill: HOT_REFILL, maxRefill: HOT_REFILL });
    await fresh.newId(scheme);
    const started = performance.now();
    for (let i = 0; i < HOT_BURST; i++) await fresh.newId(scheme);
    timed += performance.now() - started;
    count += HOT_BURST;
    fresh.close();
  }
  console.log(
    JSON.stringify({ client: "typescript", mode, ids: count, seconds: timed / 1000, rate: (count * 1000) / timed }),
  );
  client.close();
  process.exit(0);
}

async function draw(n: number): Promise<void> {
  for (let i = 0; i < n; i++) await client.newId(scheme);
}

const warm = performance.now() + 1000;
while (performance.now() < warm) await draw(step);
let count = 0;
const started = performance.now();
const end = started + Number(seconds) * 1000;
while (performance.now() < end) {
  await draw(step);
  count += step;
}
const elapsed = (performance.now() - started) / 1000;
console.log(JSON.stringify({ client: "typescript", mode, ids: count, seconds: elapsed, rate: count / elapsed }));
client.close();
