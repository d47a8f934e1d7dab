import assert from "node:assert/strict";
import { test } from "node:test";
import { IdentityOrder, Repeats, type Rule } from "../src/repeats.js";

function snowflake(worker: bigint, unit: bigint): string {
  return ((unit << 22n) | (worker << 12n)).toString(16).padStart(16, "0");
}

test("an answer led by an earlier middle ID fails per issuing identity; a late concurrent one passes", () => {
  const order = IdentityOrder.from({
    digits: "0123456789abcdef",
    strip: "",
    identity: [{ field: "worker_id", shift: 12, bits: 10 }],
  });
  assert.ok(order);
  const rule: Rule = { scheme: "snowflake", rising: false, order };
  const repeats = new Repeats();
  repeats.check("k", [snowflake(5n, 100n), snowflake(5n, 101n), snowflake(5n, 102n)], "ID", 1, rule);
  assert.throws(
    () => repeats.check("k", [snowflake(5n, 101n), snowflake(5n, 130n), snowflake(5n, 131n)], "ID", 1, rule),
    /not above an ID of its issuer/,
  );
  repeats.check("k", [snowflake(6n, 90n), snowflake(5n, 140n)], "ID", 1, rule);
  repeats.check("k", [snowflake(5n, 120n)], "ID", 1, rule);
});

test("128-bit integers, and sequence intervals", () => {
  const order = IdentityOrder.from({
    digits: "0123456789ABCDEFGHJKMNPQRSTVWXYZ",
    identity: [{ field: "publisher_id", shift: 48, bits: 16 }],
  });
  assert.equal(order?.integer("7ZZZZZZZZZZZZZZZZZZZZZZZZZ"), (1n << 128n) - 1n);
  assert.equal(order?.integer("7ZZZZZZZZZZZZZZZZZZZZZZZZi"), null);
  const repeats = new Repeats();
  repeats.checkNext("s", [1010n, 1011n, 1012n]);
  assert.throws(() => repeats.checkNext("s", [1011n, 1031n, 1032n]), /inside 1010..1012 received before/);
  assert.throws(() => repeats.checkRange("s", 1012n, 1020n), /overlaps 1010..1012/);
  repeats.checkRange("s", 1013n, 1020n);
});
