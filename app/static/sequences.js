// idmint decode page: numbers of the fleet's sequences (invoice numbers such as INV-20261127-0001233). Presentation
// only: the server reads the text with every sequence's template (GET v1/sequence-numbers/{text}) and checks its
// check digit; this script asks for a one-line text once the sequences with a template are known (GET v1/sequences),
// and shows what the server answered in its own section. It knows no template.
"use strict";

(() => {
  const DEBOUNCE_MS = 300;
  const TEXT_MAX = 200;
  const $ = (sel) => document.querySelector(sel);
  const input = $("#ids");
  const box = $("#sequence-number");
  if (!input || !box) return;
  const list = $("#sequence-number-list");
  let templated = false; // some sequence has a template: worth asking
  let timer = 0;
  let asked = 0;

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function reading(r) {
    const item = el("li");
    item.append(el("strong", r.name), ` \u2014 number ${r.value}`);
    if (r.period) item.append(`, period beginning ${r.period}`);
    item.append(r.check_digit ? `, ${r.check_digit} check digit correct` : "", `; ${r.state}`);
    item.dataset.sequence = r.name;
    return item;
  }

  async function read(text) {
    const mine = ++asked;
    try {
      const response = await fetch("v1/sequence-numbers/" + text.split("/").map(encodeURIComponent).join("/"));
      if (!response.ok || mine !== asked) return;
      const answer = await response.json();
      if (mine !== asked) return;
      list.replaceChildren(...answer.readings.map(reading));
      box.hidden = answer.readings.length === 0;
    } catch (_) {
      /* the decode answer stays; this box is extra */
    }
  }

  function changed() {
    clearTimeout(timer);
    const text = input.value.trim();
    if (!templated || !text || text.length > TEXT_MAX || /\s/.test(text)) {
      asked++;
      box.hidden = true;
      return;
    }
    timer = setTimeout(() => read(text), DEBOUNCE_MS);
  }

  input.addEventListener("input", changed);
  fetch("v1/sequences")
    .then((response) => (response.ok ? response.json() : { sequences: [] }))
    .then((catalogue) => {
      templated = catalogue.sequences.some((s) => s.template);
      changed(); // a deep link (/decode?id=...) filled the input before the list came
    })
    .catch(() => {});
})();
