// idmint decode page. Presentation only: the server picks ID-shaped tokens out of the text, detects the scheme,
// validates and decodes (POST v1/decode); this script words the answers, formats times, sorts the table and
// writes the CSV. No build step, no dependencies, no network access beyond the server that served the page.
"use strict";

(() => {
  const DEBOUNCE_MS = 250;
  const URL_TEXT_MAX = 2000; // longest text kept in the /decode?id=... link the address bar shows
  const AGE_REFRESH_MS = 30_000;

  // Everything about the schemes (titles, examples, field captions, bit layouts) comes from GET v1/schemes, and
  // each reading's fields in words and its summary come with the decode answer: this script knows no scheme.
  let schemeInfo = {}; // scheme name -> its /v1/schemes entry
  const examples = {}; // example button name -> text (one per scheme, a log excerpt, an invalid ID)

  const $ = (sel, root = document) => root.querySelector(sel);

  const input = $("#ids");
  const statusEl = $("#status");
  const results = $("#results");
  const single = $("#single");
  const tableBlock = $("#table-block");
  const tableBody = $("#id-table-body");
  const tableSummary = $("#table-summary");
  const layoutList = $("#layout-list");

  let layoutIndex = {}; // scheme -> field name -> {bits: [..], description}
  let tableRows = [];
  let sortState = { key: "line", dir: "asc" };
  let requestSeq = 0;
  let inflight = null;
  let debounceTimer = 0;
  let layoutsReady = Promise.resolve(); // settles once /v1/schemes has been read (or failed)

  // --- small helpers ------------------------------------------------------------------------------------------------

  function el(tag, attrs = {}, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  // JSON.parse that keeps integers beyond 2**53 exact (as BigInt), using the reviver's source text where the
  // browser offers it (Chromium 114+); elsewhere such integers stay (rounded) numbers.
  function parseJson(text) {
    return JSON.parse(text, function reviver(key, value, context) {
      if (typeof value === "number" && !Number.isSafeInteger(value) && context && /^-?\d+$/.test(context.source)) {
        return BigInt(context.source);
      }
      return value;
    });
  }

  const isInt = (v) => typeof v === "bigint" || (typeof v === "number" && Number.isInteger(v));

  function hex(value, digits) {
    if (!isInt(value)) return String(value);
    const negative = typeof value === "bigint" ? value < 0n : value < 0;
    const abs = negative ? -value : value;
    return (negative ? "-" : "") + "0x" + abs.toString(16).toUpperCase().padStart(digits, "0");
  }

  function grouped(value) {
    if (!isInt(value)) return String(value);
    return value.toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }

  function plural(n, word, many = word + "s") {
    return `${grouped(n)} ${n === 1 ? word : many}`;
  }

  function schemeTitle(name) {
    return (schemeInfo[name] && schemeInfo[name].title) || name;
  }

  function badge(scheme) {
    return el("span", { class: `badge badge-${scheme}`, text: scheme });
  }

  // --- API ----------------------------------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, detail) {
      super(detail);
      this.status = status;
    }
  }

  function detailOf(body) {
    if (!body || body.detail === undefined) return "";
    if (typeof body.detail === "string") return body.detail;
    if (Array.isArray(body.detail)) return body.detail.map((d) => d.msg || JSON.stringify(d)).join("; ");
    return JSON.stringify(body.detail);
  }

  async function api(path, options = {}) {
    const response = await fetch(path, { headers: { accept: "application/json" }, ...options });
    const text = await response.text();
    let body = null;
    try {
      body = text ? parseJson(text) : null;
    } catch {
      body = null;
    }
    if (!response.ok) {
      throw new ApiError(response.status, detailOf(body) || `${response.status} ${response.statusText}`.trim());
    }
    return body;
  }

  // --- times ----------------------------------------------------------------------------------------------------------

  const browserZone = (() => {
    try {
      return Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
    } catch {
      return "local time";
    }
  })();

  // RFC 3339 UTC from the server ("2025-01-01T00:00:00.123456Z") -> {ms, fraction, sortKey}; null if not one.
  function parseTimestamp(ts) {
    if (typeof ts !== "string") return null;
    const m = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?Z$/.exec(ts);
    if (!m) return null;
    const fraction = m[2] || "";
    const ms = Date.parse(`${m[1]}.${fraction.padEnd(3, "0").slice(0, 3)}Z`);
    if (Number.isNaN(ms)) return null;
    return { ms, fraction, sortKey: `${m[1]}.${fraction.padEnd(9, "0")}` };
  }

  const pad = (n, width = 2) => String(n).padStart(width, "0");

  function zoneOffset(date) {
    const minutes = -date.getTimezoneOffset();
    const sign = minutes < 0 ? "-" : "+";
    const abs = Math.abs(minutes);
    return `UTC${sign}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`;
  }

  // The same instant in the browser's zone, keeping the server's sub-second digits (zone offsets are whole minutes).
  function localTime(parsed) {
    const d = new Date(parsed.ms);
    const fraction = parsed.fraction ? `.${parsed.fraction}` : "";
    const stamp = `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}${fraction}`;
    return { stamp, zone: `${browserZone}, ${zoneOffset(d)}` };
  }

  const relative = new Intl.RelativeTimeFormat("en", { numeric: "always" });
  const AGE_UNITS = [
    [60, 1, "second"],
    [3600, 60, "minute"],
    [86400, 3600, "hour"],
    [86400 * 31, 86400, "day"],
    [86400 * 365.25, 86400 * 30.4375, "month"],
    [Infinity, 86400 * 365.25, "year"],
  ];

  function age(ms) {
    const seconds = (ms - Date.now()) / 1000;
    const abs = Math.abs(seconds);
    if (abs < 1) return "just now";
    for (const [limit, size, unit] of AGE_UNITS) {
      if (abs < limit) return relative.format(Math.trunc(seconds / size), unit);
    }
    return "";
  }

  function ageNode(parsed, tag = "span", cls = "age") {
    const node = el(tag, { class: cls, dataset: { ageMs: String(parsed.ms) } });
    refreshAge(node);
    return node;
  }

  function refreshAge(node) {
    node.textContent = age(Number(node.dataset.ageMs));
  }

  const FUTURE_SLACK_MS = 60_000;

  function futureNote(parsed) {
    if (parsed.ms <= Date.now() + FUTURE_SLACK_MS) return null;
    return el("span", { class: "future-note", text: "In the future: an unlikely reading, or the issuing node's clock was ahead." });
  }

  // --- what each field means, in words (the server words them; captions come from /v1/schemes) --------------------

  function describeField(candidate, name, value) {
    const layout = (layoutIndex[candidate.scheme] || {})[name];
    const captions = (schemeInfo[candidate.scheme] && schemeInfo[candidate.scheme].captions) || {};
    const words = candidate.words || {};
    const meaning = words[name] !== undefined ? words[name]
      : typeof value === "object" && value !== null && typeof value !== "bigint" ? JSON.stringify(value) : String(value);
    const caption = captions[name] || (layout ? layout.description : "");
    return { meaning, caption, bits: layout ? layout.bits.join(", ") : "", layoutDescription: layout ? layout.description : "" };
  }

  // One line in words: what a decoded ID says about its maker.
  function summary(candidate) {
    if (typeof candidate.summary === "string") return candidate.summary;
    return Object.entries(candidate.fields || {}).map(([k, v]) => `${k} ${v}`).join(", ");
  }

  // --- rendering: one ID -------------------------------------------------------------------------------------------

  function renderCard(item, candidate, index) {
    const titleId = `card-${index}-title`;
    const parsed = parseTimestamp(candidate.timestamp);
    const facts = el("dl", { class: "facts" });
    const fact = (label, ...value) => facts.append(el("dt", { text: label }), el("dd", {}, ...value));

    const canonical = el("span", { class: "value", dataset: { fact: "canonical" }, text: candidate.id });
    fact("Canonical form", canonical, copyButton(candidate.id, "canonical form"));
    if (item.input !== candidate.id) {
      fact("As pasted", el("span", { class: "value", dataset: { fact: "input" }, text: item.input }));
    }
    fact("Hex (packed bytes)", el("span", { class: "value", dataset: { fact: "hex" }, text: candidate.hex }));
    if (parsed) {
      const local = localTime(parsed);
      fact("Created, UTC", el("time", { class: "value", datetime: candidate.timestamp, dataset: { fact: "utc" }, text: candidate.timestamp }));
      fact(`Created, your time zone`, el("span", { class: "value", dataset: { fact: "local" }, text: `${local.stamp} (${local.zone})` }));
      const ageEl = ageNode(parsed);
      ageEl.dataset.fact = "age";
      fact("How long ago", ageEl, futureNote(parsed));
    } else {
      fact("Created", el("span", { dataset: { fact: "utc" }, text: "no creation time (sentinel or out of range)" }));
    }

    const ledger = candidate.ledger;
    if (ledger) {
      const flagged = ledger.status === "no_claim" || ledger.status === "future";
      fact("Issued by", el("span", {
        class: `value ledger ledger-${ledger.status}${flagged ? " ledger-flag" : ""}`,
        dataset: { fact: "issued-by", ledger: ledger.status },
        text: flagged ? `Not issued by this fleet as far as its ledger knows: ${ledger.words} (or forged)` : ledger.words,
      }));
    }
    if (candidate.plausibility && candidate.plausibility.rank > 0) {
      fact("Plausibility", el("span", { class: "value", dataset: { fact: "plausibility" }, text: candidate.plausibility.reason }));
    }

    const fieldsTable = el("table", { class: "fields" },
      el("caption", { text: "Fields, as the bit layout stores them" }),
      el("thead", {}, el("tr", {},
        el("th", { scope: "col", text: "Field" }),
        el("th", { scope: "col", text: "Value" }),
        el("th", { scope: "col", text: "What it means" }))));
    const body = el("tbody");
    const fields = candidate.fields || {};
    for (const [name, value] of Object.entries(fields)) {
      const d = describeField(candidate, name, value);
      const tooltip = [d.bits ? `bits ${d.bits}` : "", d.layoutDescription].filter(Boolean).join(": ");
      body.append(el("tr", { dataset: { field: name } },
        el("th", { scope: "row", title: tooltip || null },
          el("code", { text: name }),
          d.bits ? el("span", { class: "bits", text: `bits ${d.bits}` }) : null),
        el("td", { class: "num", text: typeof value === "string" ? `"${value}"` : String(value) }),
        el("td", {},
          el("span", { class: "meaning", text: d.meaning }),
          d.caption ? el("span", { class: "caption", text: d.caption }) : null)));
    }
    fieldsTable.append(body);

    return el("article", { class: "card", "aria-labelledby": titleId, dataset: { scheme: candidate.scheme } },
      el("div", { class: "card-head" },
        el("h3", { id: titleId }, badge(candidate.scheme), el("span", { text: schemeTitle(candidate.scheme) })),
        el("a", { href: `#layout-${candidate.scheme}`, class: "layout-link", text: `Bit layout of ${candidate.scheme}` })),
      el("div", { class: "card-body" }, facts, fieldsTable));
  }

  function copyButton(text, what) {
    if (!navigator.clipboard || !window.isSecureContext) return null;
    const button = el("button", { type: "button", class: "copy", "aria-label": `Copy the ${what}`, text: "Copy" });
    button.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(text);
        button.textContent = "Copied";
      } catch {
        button.textContent = "Copy failed";
      }
      setTimeout(() => { button.textContent = "Copy"; }, 1500);
    });
    return button;
  }

  // "not an ID of any scheme (scheme-a: rule; scheme-b: rule)" -> [[scheme, rule], ...] for a list; the text stays verbatim too.
  function splitRules(error) {
    const m = /^(.*?) \((.*)\)$/s.exec(error);
    if (!m) return null;
    const known = Object.keys(schemeInfo).concat(Object.keys(layoutIndex));
    const parts = m[2].split("; ");
    const pairs = [];
    for (const part of parts) {
      const colon = part.indexOf(": ");
      const scheme = colon > 0 ? part.slice(0, colon) : "";
      if (known.includes(scheme)) pairs.push([scheme, part.slice(colon + 2)]);
      else if (pairs.length) pairs[pairs.length - 1][1] += `; ${part}`;
      else return null;
    }
    return { lead: m[1], pairs };
  }

  function renderError(item) {
    const rules = splitRules(item.error);
    const box = el("div", { class: "notice notice-error", dataset: { error: "" } },
      el("p", {}, el("strong", { text: "Not a valid ID. " }), "The text ", el("code", { text: item.input }),
        rules ? ` is ${rules.lead}. Each scheme's rule it breaks:` : " breaks this rule:"));
    if (rules) {
      box.append(el("ul", { class: "rules" }, rules.pairs.map(([scheme, rule]) =>
        el("li", { dataset: { scheme } }, badge(scheme), el("span", { text: rule })))));
      box.append(el("details", { class: "verbatim" }, el("summary", { text: "The server's exact message" }),
        el("p", { class: "error-message", text: item.error })));
    } else {
      box.append(el("p", { class: "error-message", text: item.error }));
    }
    return box;
  }

  function renderSingle(item, text) {
    const multiLine = text.trim() !== item.input;
    if (multiLine) {
      single.append(el("p", { class: "card-found" }, `Found in line ${item.line}: `, el("code", { text: item.input })));
    }
    if (item.error) {
      single.append(renderError(item));
      const rules = splitRules(item.error);
      setStatus(rules
        ? `Not a valid ID: ${item.input} is ${rules.lead}; the rule each scheme states is listed below.`
        : `Not a valid ID: ${item.error}`, true);
      return;
    }
    const candidates = item.candidates || [];
    // Readings come ordered by plausibility (the ledger confirms it, then dated inside the fleet's lifetime).
    // One reading the ledger confirms leads, and every other reading folds away; otherwise every plausible
    // reading is shown and only the rest fold, each with its reason.
    const confirmed = confirmedReading(candidates);
    const others = confirmed ? candidates.filter((c) => c !== confirmed) : [];
    if (confirmed && others.length) {
      single.append(el("div", { class: "notice notice-ok", dataset: { confirmed: confirmed.scheme } },
        el("p", {}, el("strong", { text: `Most likely ${confirmed.scheme}: ` }), "this fleet's ledger confirms it."),
        el("p", { text: `The same text also parses as ${others.map((c) => c.scheme).join(", ")}; ` +
          `${others.length === 1 ? "that reading is" : "those readings are"} folded below.` })));
    } else if (candidates.length > 1) {
      single.append(el("div", { class: "notice notice-warn", dataset: { ambiguous: "" } },
        el("p", {}, el("strong", { text: `Parses as ${candidates.length} schemes: ` }),
          candidates.map((c) => c.scheme).join(", "), "."),
        el("p", { text: "The text alone cannot tell which scheme made it, so every reading is shown. " +
          "Where the ID came from tells which one is meant." })));
    }
    const folded = confirmed ? others : candidates.filter((c) => c.plausibility && c.plausibility.rank >= 2);
    const shown = candidates.length > folded.length ? candidates.filter((c) => !folded.includes(c)) : candidates;
    shown.forEach((candidate, i) => single.append(renderCard(item, candidate, i)));
    if (shown !== candidates && folded.length) {
      const what = confirmed ? "other reading" : "less plausible reading";
      const fold = el("details", { class: "implausible", dataset: { implausible: String(folded.length) } },
        el("summary", { text: `${plural(folded.length, what)}: ` +
          folded.map((c) => `${c.scheme} (${c.plausibility.reason})`).join("; ") }));
      folded.forEach((candidate, i) => fold.append(renderCard(item, candidate, shown.length + i)));
      single.append(fold);
    }
    const first = candidates[0];
    const parsed = first ? parseTimestamp(first.timestamp) : null;
    if (confirmed && others.length) {
      setStatus(`Most likely ${confirmed.scheme}: this fleet's ledger confirms it. ${summary(confirmed)}` +
        (parsed ? `, made ${age(parsed.ms)}.` : ".") + ` Also parses as ${others.map((c) => c.scheme).join(", ")}.`);
    } else if (candidates.length > 1) {
      setStatus(`${item.input} parses as ${candidates.length} schemes: ${candidates.map((c) => c.scheme).join(", ")}.`);
    } else if (first) {
      setStatus(`Decoded as ${first.scheme}: ${summary(first)}` + (parsed ? `, made ${age(parsed.ms)}.` : "."));
    }
  }

  // The one reading of an ID the claim ledger confirms (plausibility rank 0), or null when none or several are.
  function confirmedReading(candidates) {
    const ranked = candidates.filter((c) => c.plausibility && c.plausibility.rank === 0);
    return ranked.length === 1 ? ranked[0] : null;
  }

  // --- rendering: many IDs ---------------------------------------------------------------------------------------

  function toRow(item, index) {
    const candidates = item.candidates || [];
    // an ID several schemes read sorts by its earliest reading (a misreading usually lands far in the future)
    const keys = candidates.map((c) => parseTimestamp(c.timestamp)).filter(Boolean).map((p) => p.sortKey).sort();
    return {
      item,
      index,
      line: item.line,
      scheme: item.error ? "~invalid" : candidates.map((c) => c.scheme).join(" "),
      time: keys.length ? keys[0] : null,
    };
  }

  function compareRows(a, b) {
    const dir = sortState.dir === "asc" ? 1 : -1;
    const key = sortState.key;
    const x = a[key];
    const y = b[key];
    if (x === null && y !== null) return 1; // rows without a time go last either way
    if (y === null && x !== null) return -1;
    if (x !== y && x !== null) return (x < y ? -1 : 1) * dir;
    return (a.index - b.index) * (key === "line" ? dir : 1);
  }

  // One ID = one row (tr[data-line]); an ID several schemes read gets one extra row per further reading, with the
  // line and ID cells spanning them, so each reading's scheme, time and words line up.
  function renderRows(row) {
    const { item } = row;
    const candidates = item.candidates || [];
    const confirmed = confirmedReading(candidates); // its other readings are dimmed, as folded on a single ID
    const group = "group";
    const span = Math.max(1, candidates.length);
    const link = el("a", { href: `decode?id=${encodeURIComponent(item.input)}`, text: item.input,
      title: "Open this ID on its own (a link you can share)" });
    const idCell = el("td", { class: "id-cell", rowspan: span > 1 ? span : null }, link);
    for (const c of candidates) {
      if (c.id !== item.input) idCell.append(el("span", { class: "canonical", text: `${candidates.length > 1 ? c.scheme + ": " : ""}${c.id}` }));
    }
    const first = el("tr", { class: `${group}${item.error ? " row-error" : ""}`, dataset: { line: String(item.line) } },
      el("td", { class: "line", rowspan: span > 1 ? span : null, text: String(item.line) }),
      idCell);
    if (item.error) {
      first.append(
        el("td", {}, el("span", { class: "badge badge-invalid", text: "invalid" })),
        el("td", { class: "time", text: "—" }),
        el("td", { class: "error-text" }, errorSummary(item.error)));
      return [first];
    }
    return candidates.map((c, i) => {
      const tr = i === 0 ? first : el("tr", { class: `${group} also`, dataset: { also: String(item.line) } });
      if (i < candidates.length - 1) tr.classList.add("before-also");
      const parsed = parseTimestamp(c.timestamp);
      let time = el("td", { class: "time", text: "no time" });
      if (parsed) {
        const local = localTime(parsed);
        time = el("td", { class: "time" },
          el("time", { datetime: c.timestamp, text: c.timestamp }),
          el("span", { class: "sub", title: local.zone }, `${local.stamp} · `, ageNode(parsed, "span", "row-age")),
          futureNote(parsed));
      }
      const words = el("td", { class: "words", text: summary(c) });
      if (c.ledger) {
        const flagged = c.ledger.status === "no_claim" || c.ledger.status === "future";
        words.append(el("span", { class: `sub ledger${flagged ? " ledger-flag" : ""}`, dataset: { ledger: c.ledger.status },
          text: flagged ? `not issued by this fleet: ${c.ledger.words}` : c.ledger.words }));
      }
      if ((c.plausibility && c.plausibility.rank >= 2) || (confirmed && c !== confirmed)) tr.classList.add("implausible");
      if (c === confirmed && candidates.length > 1) tr.dataset.confirmed = c.scheme;
      tr.append(el("td", {}, badge(c.scheme)), time, words);
      return tr;
    });
  }

  // In a table cell, a long "not an ID of any scheme (...)" folds into a disclosure with one rule per scheme.
  function errorSummary(error) {
    const rules = splitRules(error);
    if (!rules) return el("span", { class: "error-message", text: error });
    return el("details", { class: "row-rules" },
      el("summary", { text: rules.lead }),
      el("ul", { class: "rules" }, rules.pairs.map(([scheme, rule]) => el("li", { dataset: { scheme } }, `${scheme}: ${rule}`))));
  }

  function renderTableBody() {
    const sorted = tableRows.slice().sort(compareRows);
    const fragment = document.createDocumentFragment();
    sorted.forEach((row, position) => {
      row.nodes = row.nodes || renderRows(row); // built once; sorting only moves them
      for (const tr of row.nodes) tr.classList.toggle("group-odd", position % 2 === 1);
      fragment.append(...row.nodes);
    });
    tableBody.replaceChildren(fragment);
    for (const th of document.querySelectorAll("#id-table th[data-sort-key]")) {
      if (th.dataset.sortKey === sortState.key) th.setAttribute("aria-sort", sortState.dir === "asc" ? "ascending" : "descending");
      else th.removeAttribute("aria-sort");
    }
  }

  function renderTable(items, truncated) {
    tableRows = items.map(toRow);
    renderTableBody();
    const invalid = items.filter((i) => i.error).length;
    const ambiguous = items.filter((i) => (i.candidates || []).length > 1).length;
    const lines = new Set(items.map((i) => i.line)).size;
    const parts = [`${plural(items.length, "ID")} found on ${plural(lines, "line")}`];
    if (invalid) parts.push(`${grouped(invalid)} invalid`);
    if (ambiguous) parts.push(`${grouped(ambiguous)} parse as more than one scheme`);
    tableSummary.textContent = "Open an ID on its own with its link. The CSV has one row per scheme that reads an ID.";
    tableBlock.hidden = false;
    setStatus(`${parts.join("; ")}.${truncated ? " Only the first ones are shown." : ""}`);
  }

  // --- CSV -------------------------------------------------------------------------------------------------------

  const CSV_COLUMNS = ["line", "input", "scheme", "candidates", "id", "hex", "timestamp_utc", "summary", "fields", "error",
    "issued_by", "ledger", "plausibility"];

  function csvCell(value) {
    let text = value === null || value === undefined ? "" : String(value);
    if (/^[=+\-@\t\r]/.test(text)) text = `'${text}`; // keep spreadsheets from running pasted text as a formula
    return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
  }

  function buildCsv() {
    const lines = [CSV_COLUMNS.join(",")];
    for (const row of tableRows.slice().sort(compareRows)) {
      const { item } = row;
      const candidates = item.candidates || [];
      if (item.error || candidates.length === 0) {
        lines.push([item.line, item.input, "", 0, "", "", "", "", "", item.error || "", "", "", ""].map(csvCell).join(","));
        continue;
      }
      for (const c of candidates) {
        const fields = Object.entries(c.fields || {}).map(([k, v]) => `${k}=${v}`).join("; ");
        const ledger = c.ledger ? c.ledger.words : "";
        const status = c.ledger ? c.ledger.status : "";
        const plausible = c.plausibility ? `${c.plausibility.rank}: ${c.plausibility.reason}` : "";
        lines.push([item.line, item.input, c.scheme, candidates.length, c.id, c.hex, c.timestamp, summary(c), fields, "",
          c.issued_by ? ledger : "", status, plausible].map(csvCell).join(","));
      }
    }
    return lines.join("\r\n") + "\r\n";
  }

  function downloadCsv() {
    const blob = new Blob([buildCsv()], { type: "text/csv;charset=utf-8" });
    const url = URL.createObjectURL(blob);
    const now = new Date();
    const stamp = `${now.getUTCFullYear()}${pad(now.getUTCMonth() + 1)}${pad(now.getUTCDate())}-` +
      `${pad(now.getUTCHours())}${pad(now.getUTCMinutes())}${pad(now.getUTCSeconds())}`;
    const a = el("a", { href: url, download: `idmint-decoded-${stamp}.csv`, class: "visually-hidden" });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  }

  // --- decode loop ----------------------------------------------------------------------------------------------

  function setStatus(text, isError = false) {
    statusEl.textContent = text;
    statusEl.classList.toggle("is-error", isError);
  }

  function setState(state) {
    results.dataset.state = state;
    results.setAttribute("aria-busy", state === "loading" ? "true" : "false");
  }

  function clearResults() {
    single.replaceChildren();
    tableBody.replaceChildren();
    tableRows = [];
    tableBlock.hidden = true;
  }

  function render(body, text) {
    clearResults();
    const items = (body && body.items) || [];
    if (items.length === 0) {
      single.append(el("div", { class: "notice", dataset: { empty: "" } },
        el("p", { text: "No ID found in the text. Paste an ID of any scheme in any accepted form, or lines that contain IDs." })));
      setStatus("No ID found in the text.");
    } else if (items.length === 1) {
      renderSingle(items[0], text);
    } else {
      renderTable(items, body.truncated);
    }
    if (body && body.truncated) {
      const note = el("div", { class: "notice notice-warn", dataset: { truncated: "" } },
        el("p", { text: `The text is longer than the server reads at once; the first ${grouped(items.length)} IDs are shown.` }));
      (items.length > 1 ? tableBlock : single).prepend(note);
    }
  }

  // Public IDs (format=public): pasted lines that a public-ID key opens (POST v1/public) are replaced by the
  // internal IDs they stand for before decoding, and listed above the answer. A server without public-ID keys
  // (or a key without the decode scope) answers an error here, and nothing is replaced.
  const PUBLIC_TEXT_MAX = 128;
  const PUBLIC_BATCH_MAX = 10000;

  async function revealPublic(text, signal) {
    const lines = text.split("\n");
    const candidates = [];
    lines.forEach((line, i) => {
      const token = line.trim();
      if (token && token.length <= PUBLIC_TEXT_MAX && !/\s/.test(token)) candidates.push([i, token]);
    });
    await layoutsReady; // /v1/schemes says whether this server reads public IDs ("public": true)
    const served = Object.values(schemeInfo).some((scheme) => scheme && scheme.public === true);
    if (!served || !candidates.length || candidates.length > PUBLIC_BATCH_MAX) return { text, opened: [] };
    let body;
    try {
      body = await api("v1/public", {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json" },
        body: JSON.stringify({ texts: candidates.map(([, token]) => token) }),
        signal,
      });
    } catch (error) {
      if (error.name === "AbortError") throw error;
      return { text, opened: [] };
    }
    const opened = [];
    (body && Array.isArray(body.items) ? body.items : []).forEach((item, k) => {
      if (!item || typeof item.id !== "string" || k >= candidates.length) return;
      const [i, token] = candidates[k];
      lines[i] = item.id;
      opened.push(`${token} is ${item.scheme} ${item.id} (key ${item.key_id})`);
    });
    return { text: opened.length ? lines.join("\n") : text, opened };
  }

  async function decodeNow() {
    clearTimeout(debounceTimer);
    const text = input.value;
    const seq = ++requestSeq;
    if (inflight) inflight.abort();
    inflight = null;
    updateUrl(text);
    if (!text.trim()) {
      clearResults();
      setStatus("");
      setState("idle");
      return;
    }
    const controller = new AbortController();
    inflight = controller;
    setState("loading");
    try {
      const revealed = await revealPublic(text, controller.signal);
      const body = await api("v1/decode", {
        method: "POST",
        headers: { "content-type": "application/json", accept: "application/json" },
        body: JSON.stringify({ text: revealed.text }),
        signal: controller.signal,
      });
      await layoutsReady; // field captions and bit ranges come from /v1/schemes
      if (seq !== requestSeq) return;
      render(body, revealed.text);
      if (revealed.opened.length) {
        single.prepend(el("div", { class: "notice", dataset: { publicIds: "" } },
          el("p", {}, el("strong", { text: "Public IDs: " }), revealed.opened.join("; "))));
      }
      setState("done");
    } catch (error) {
      if (seq !== requestSeq || error.name === "AbortError") return;
      clearResults();
      const message = error instanceof ApiError ? error.message : `the server could not be reached (${error.message})`;
      single.append(el("div", { class: "notice notice-error", dataset: { requestError: "" } },
        el("p", {}, el("strong", { text: "Could not decode: " }), message)));
      setStatus(`Could not decode: ${message}`, true);
      setState("error");
    } finally {
      if (inflight === controller) inflight = null;
    }
  }

  function scheduleDecode() {
    clearTimeout(debounceTimer);
    setState("loading");
    debounceTimer = setTimeout(decodeNow, DEBOUNCE_MS);
  }

  // /decode?id=<text> in the address bar, so what is on screen can be shared; long pastes are left out of it.
  function updateUrl(text) {
    const url = new URL("decode", document.baseURI);
    if (text.trim() && text.length <= URL_TEXT_MAX) url.search = `?id=${encodeURIComponent(text)}`;
    url.hash = location.hash;
    if (url.href !== location.href) history.replaceState(null, "", url);
  }

  // --- scheme layouts -------------------------------------------------------------------------------------------

  function schemeList(body) {
    let list = [];
    if (Array.isArray(body)) list = body;
    else if (body && Array.isArray(body.schemes)) list = body.schemes;
    else if (body && typeof body === "object") {
      const source = body.schemes && typeof body.schemes === "object" ? body.schemes : body;
      list = Object.entries(source).map(([name, value]) => ({ name, ...value }));
    }
    return list.filter((s) => s && typeof s.name === "string");
  }

  function layoutFields(scheme) {
    const fields = scheme.layout || scheme.fields || scheme.bit_layout || [];
    return Array.isArray(fields) ? fields.filter((f) => f && f.name) : [];
  }

  // "127..76" -> 52, "15..13,11..4" -> 11, "12" -> 1
  function bitWidth(bits) {
    let width = 0;
    for (const part of String(bits).split(",")) {
      const m = /^\s*(\d+)\s*(?:\.\.\s*(\d+))?\s*$/.exec(part);
      if (m) width += m[2] === undefined ? 1 : Math.abs(Number(m[1]) - Number(m[2])) + 1;
    }
    return width || 1;
  }

  function indexLayouts(list) {
    layoutIndex = {};
    for (const scheme of list) {
      const index = {};
      for (const f of layoutFields(scheme)) {
        // a field split over several bit ranges (e.g. a generator ID in two parts) may appear more than once
        const entry = index[f.name] || (index[f.name] = { bits: [], description: f.description || "" });
        if (f.bits !== undefined) entry.bits.push(String(f.bits));
      }
      layoutIndex[scheme.name] = index;
    }
  }

  const CATALOGUE_LABELS = {
    node: "this node", identity: "identity range", limits: "request limits", formats: "text forms",
    canonical_format: "canonical form", packed_bytes: "packed bytes", timestamp_precision: "time precision",
    high_water_mark: "high-water mark",
  };
  const catalogueLabel = (key) => CATALOGUE_LABELS[key] || key.replaceAll("_", " ");

  function valueNode(value) {
    if (value === "") return el("span", { class: "hint", text: "(empty)" });
    if (isInt(value)) return document.createTextNode(grouped(value));
    if (Array.isArray(value)) {
      if (value.every((v) => typeof v !== "object" || v === null)) {
        return el("span", {}, value.flatMap((v, i) => [i ? ", " : "", el("code", { text: String(v) })]));
      }
      return el("ul", {}, value.map((v) => el("li", {}, valueNode(v))));
    }
    if (value && typeof value === "object" && typeof value !== "bigint") {
      return el("dl", {}, Object.entries(value).flatMap(([k, v]) => [el("dt", { text: catalogueLabel(k) }), el("dd", {}, valueNode(v))]));
    }
    return document.createTextNode(String(value));
  }

  function renderLayouts(list) {
    const nodes = list.map((scheme) => {
      const fields = layoutFields(scheme);
      const total = fields.reduce((sum, f) => sum + bitWidth(f.bits), 0);
      const bar = el("div", { class: "bitbar", "aria-hidden": "true" }, fields.map((f) => {
        const span = el("span", { title: `${f.name}: bits ${f.bits}`, text: f.name });
        span.style.flexGrow = String(bitWidth(f.bits));
        return span;
      }));
      const table = el("table", { class: "layout-table" },
        el("caption", { class: "visually-hidden", text: `Bit layout of ${scheme.name}` }),
        el("thead", {}, el("tr", {},
          el("th", { scope: "col", text: "Field" }), el("th", { scope: "col", text: "Bits" }),
          el("th", { scope: "col", text: "Meaning" }))),
        el("tbody", {}, fields.map((f) => el("tr", {},
          el("th", { scope: "row" }, el("code", { text: f.name })),
          el("td", { class: "bits", text: String(f.bits) }),
          el("td", { text: f.description || "" })))));
      const rest = Object.entries(scheme).filter(([k]) => !["name", "title", "captions", "layout", "fields", "bit_layout"].includes(k));
      const details = el("details", { id: `layout-${scheme.name}`, dataset: { scheme: scheme.name } },
        el("summary", {}, badge(scheme.name), el("strong", { text: schemeTitle(scheme.name) }),
          el("span", { class: "summary-text", text: total ? `${total} bits, ${plural(fields.length, "field")}` : "" })),
        el("div", { class: "layout-body" }, fields.length ? [bar, table] : null,
          rest.length ? [el("h3", { text: "Text forms and limits" }),
            el("dl", {}, rest.flatMap(([k, v]) => [el("dt", { text: catalogueLabel(k) }), el("dd", {}, valueNode(v))]))] : null));
      return details;
    });
    layoutList.replaceChildren(...nodes);
    openLayoutFromHash();
  }

  async function loadLayouts() {
    try {
      const list = schemeList(await api("v1/schemes"));
      schemeInfo = Object.fromEntries(list.map((scheme) => [scheme.name, scheme]));
      indexLayouts(list);
      addExamples(list);
      renderLayouts(list);
    } catch (error) {
      layoutList.replaceChildren(el("p", { class: "notice notice-error", text: `The scheme layouts could not be loaded: ${error.message}` }));
    }
  }

  // One example button per scheme (its own example ID), then a log excerpt made of them and an invalid ID (the
  // first example cut short), placed before the page's other example buttons.
  function addExamples(list) {
    const withExample = list.filter((scheme) => typeof scheme.example === "string" && scheme.example);
    const container = $("ul.examples");
    const first = container.firstElementChild;
    for (const scheme of withExample) {
      examples[scheme.name] = scheme.example;
      container.insertBefore(el("li", {}, el("button", { type: "button", class: "example", dataset: { example: scheme.name },
        text: scheme.title || scheme.name })), first);
    }
    const levels = ["INFO ", "WARN ", "INFO ", "DEBUG"];
    examples.log = withExample.map((scheme, i) =>
      `2025-01-01 00:00:${String(i + 3).padStart(2, "0")} ${levels[i % levels.length]} app   ${scheme.name} id ${scheme.example} handled`).join("\n");
    examples.invalid = withExample.length ? withExample[0].example.slice(0, -1) : "";
  }

  function openLayoutFromHash() {
    const id = decodeURIComponent(location.hash.slice(1));
    if (!id.startsWith("layout-")) return;
    const target = document.getElementById(id);
    if (!target || target.tagName !== "DETAILS") return;
    target.open = true;
    target.classList.remove("layout-target");
    void target.offsetWidth; // restart the highlight animation
    target.classList.add("layout-target");
    target.scrollIntoView({ block: "start" });
    target.querySelector("summary").focus({ preventScroll: true });
  }

  // --- wiring ---------------------------------------------------------------------------------------------------

  function setText(text) {
    input.value = text;
    fitInput();
    decodeNow();
  }

  // the input grows with what is pasted, up to a dozen lines (then it scrolls)
  function fitInput() {
    const lines = (input.value.match(/\n/g) || []).length + 1;
    input.rows = Math.min(12, Math.max(4, lines));
  }

  input.addEventListener("input", (event) => {
    fitInput();
    // a paste or drop is complete at once: decode it now; typing waits for a pause
    if (event.inputType === "insertFromPaste" || event.inputType === "insertFromDrop") decodeNow();
    else scheduleDecode();
  });
  $("#clear").addEventListener("click", () => {
    setText("");
    input.focus();
  });
  $("ul.examples").addEventListener("click", (event) => {
    const button = event.target.closest("button.example");
    if (button) setText(examples[button.dataset.example] || "");
  });
  for (const button of document.querySelectorAll("button.sort")) {
    button.addEventListener("click", () => {
      const key = button.dataset.sort;
      sortState = sortState.key === key
        ? { key, dir: sortState.dir === "asc" ? "desc" : "asc" }
        : { key, dir: "asc" };
      renderTableBody();
      const label = { line: "line", scheme: "scheme", time: "creation time" }[key];
      const order = key === "time" ? (sortState.dir === "asc" ? "oldest first" : "newest first") : `${sortState.dir}ending`;
      setStatus(`Sorted by ${label}, ${order}.`);
    });
  }
  $("#download-csv").addEventListener("click", downloadCsv);
  window.addEventListener("hashchange", openLayoutFromHash);
  setInterval(() => document.querySelectorAll("[data-age-ms]").forEach(refreshAge), AGE_REFRESH_MS);

  $("#browser-zone").textContent = browserZone;
  setState("idle");
  layoutsReady = loadLayouts(); // never rejects: a failure is shown in the layouts section

  const initial = new URLSearchParams(location.search).get("id");
  if (initial) setText(initial);
})();
