// idmint decode page: the "IDs made between two times" box. Presentation only: the server computes the bounds and
// the SQL (GET v1/bounds/{scheme}); this script lists the schemes and column types /v1/schemes gives, sends the
// form and shows the answer. It knows no scheme.
"use strict";

(() => {
  const $ = (sel) => document.querySelector(sel);
  const form = $("#bounds-form");
  if (!form) return;
  const schemeSelect = $("#bounds-scheme");
  const storageSelect = $("#bounds-storage");
  const fromInput = $("#bounds-from");
  const toInput = $("#bounds-to");
  const result = $("#bounds-result");
  const optionsBox = $("#bounds-options");
  const HOUR_MS = 3_600_000;
  let entries = {}; // scheme name -> its /v1/schemes "bounds" member

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function option(value, label) {
    const node = el("option", label);
    node.value = value;
    return node;
  }

  // The scheme's own parameters (snowflake layout, TypeID prefix), one text input each, named by /v1/schemes.
  function fillStorages() {
    const entry = entries[schemeSelect.value];
    storageSelect.replaceChildren(...(entry ? entry.storages.map((s) => option(s, s)) : []));
    const fields = Object.entries((entry && entry.options) || {}).map(([name, description]) => {
      const field = el("div", undefined, "field");
      const label = el("label", `${name} (optional)`);
      const input = el("input");
      label.htmlFor = input.id = `bounds-option-${name}`;
      input.name = name;
      input.type = "text";
      input.title = description;
      input.spellcheck = false;
      input.autocomplete = "off";
      input.dataset.option = name;
      field.append(label, input);
      return field;
    });
    optionsBox.replaceChildren(...fields);
  }

  function show(rows, note) {
    const list = el("dl", undefined, "bounds-answer");
    for (const [term, value, isCode] of rows) {
      list.append(el("dt", term));
      const dd = el("dd");
      dd.append(isCode ? el("code", value) : document.createTextNode(value));
      list.append(dd);
    }
    result.replaceChildren(list);
    if (note) result.append(el("p", note, "hint"));
  }

  function showError(message) {
    const box = el("div", undefined, "notice notice-error");
    box.append(el("p", message));
    result.replaceChildren(box);
  }

  async function submit(event) {
    event.preventDefault();
    const name = schemeSelect.value;
    const entry = entries[name] || { params: {} };
    const query = new URLSearchParams({ ...entry.params });
    for (const field of ["from", "to", "storage", "column", "dialect"]) {
      const value = form.elements[field].value.trim();
      if (value) query.set(field, value);
    }
    for (const input of optionsBox.querySelectorAll("input[data-option]")) {
      const value = input.value.trim();
      if (value) query.set(input.dataset.option, value);
    }
    result.replaceChildren(el("p", "Asking the server…", "hint"));
    let response;
    try {
      response = await fetch(`v1/bounds/${encodeURIComponent(name)}?${query}`, { headers: { accept: "application/json" } });
    } catch (err) {
      showError(`The server could not be reached: ${err.message}`);
      return;
    }
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      showError(typeof body.detail === "string" ? body.detail : `The server answered ${response.status}.`);
      return;
    }
    show(
      [
        ["Interval", `${body.from} to ${body.to} (read as ${body.read_as || body.scheme})`, false],
        ["Lower bound (inclusive)", body.lower, true],
        ["Upper bound (exclusive)", body.upper === null ? "none: no ID of the scheme is that new" : body.upper, body.upper !== null],
        [`SQL (${body.dialect})`, body.sql, true],
      ],
      body.note,
    );
  }

  async function load() {
    const now = Date.now();
    toInput.value = new Date(now - (now % HOUR_MS)).toISOString().replace(".000Z", "Z");
    fromInput.value = new Date(now - (now % HOUR_MS) - HOUR_MS).toISOString().replace(".000Z", "Z");
    try {
      const response = await fetch("v1/schemes", { headers: { accept: "application/json" } });
      const body = await response.json();
      const raw = body.schemes ?? body;
      const list = Array.isArray(raw) ? raw : Object.values(raw);
      for (const scheme of list) {
        if (scheme.bounds && scheme.bounds.storages.length) {
          entries[scheme.name] = scheme.bounds;
          schemeSelect.append(option(scheme.name, scheme.title || scheme.name));
        }
      }
    } catch (err) {
      showError(`The scheme list could not be read: ${err.message}`);
    }
    fillStorages();
  }

  schemeSelect.addEventListener("change", fillStorages);
  form.addEventListener("submit", submit);
  load();
})();
