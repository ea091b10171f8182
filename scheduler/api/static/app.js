// The tickwork viewer's core: helpers, the API client, polling, routing and the login form.
// The pages live in runs.js, schedules.js and agents.js, the live tree in tree.js and the chart
// in chart.js: plain scripts loaded in order by index.html, no build step.
// Everything the API returns is inserted as text (text nodes, textContent), never as HTML:
// journal text comes from models and tools and is hostile.
"use strict";

const TOKEN_KEY = "tickwork.token";
const REFRESH_MS = 3000;
const TERMINAL = ["completed", "failed", "cancelled"];
const UUID = "[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}";

const main = document.getElementById("main");
let page = null; // the open page's {stop()}: its timers and its event source

// --- helpers -----------------------------------------------------------------------------

/** An element; string children become text nodes, null children are skipped. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value != null && value !== false) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child == null) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

function short(text, limit = 120) {
  text = String(text ?? "").split(/\s+/).filter(Boolean).join(" ");
  return text.length <= limit ? text : text.slice(0, limit - 1) + "…";
}

function duration(seconds) {
  seconds = Math.max(seconds, 0);
  if (seconds < 1) return `${Math.round(seconds * 1000)} ms`;
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  return `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
}

/** The end of a UUIDv7 (its start is a timestamp, alike for runs made close together). */
function shortId(id) {
  return "…" + String(id).slice(-8);
}

/** A stored UTC time in the browser's zone, as the browser writes dates. */
function when(text) {
  return text ? new Date(text).toLocaleString() : "—";
}

/** A compact local time for tables: "today 09:30", "Dec 2, 09:30" (24-hour clock). */
function whenShort(text) {
  if (!text) return "—";
  const date = new Date(text);
  const time = date.toLocaleTimeString([], {hour: "2-digit", minute: "2-digit", hourCycle: "h23"});
  if (date.toDateString() === new Date().toDateString()) return `today ${time}`;
  return `${date.toLocaleDateString([], {month: "short", day: "numeric"})}, ${time}`;
}

/** "in 4 min", "2 h ago": how far a time is from now, for next and last runs. */
function relative(text) {
  if (!text) return "";
  const seconds = (Date.parse(text) - Date.now()) / 1000;
  const size = Math.abs(seconds);
  const amount = size < 60 ? `${Math.round(size)} s` : size < 3600 ? `${Math.round(size / 60)} min`
    : size < 172800 ? `${Math.round(size / 3600)} h` : `${Math.round(size / 86400)} days`;
  return seconds >= 0 ? `in ${amount}` : `${amount} ago`;
}

/** The browser's own zone, named as in the CLI (an IANA name). */
function localZone() {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";
}

function count(n) {
  return Number(n || 0).toLocaleString("en-US");
}

function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message || "";
  box.hidden = !message;
}

/** A short confirmation under the header ("run …ab12 queued"), with optional links. */
function notify(...children) {
  const box = document.getElementById("notice");
  box.replaceChildren(...children.filter(child => child != null));
  box.hidden = !children.length;
}

async function api(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = {Accept: "application/json", Authorization: `Bearer ${token}`};
  if (options.json !== undefined) {
    headers["Content-Type"] = "application/json";
    options = {...options, body: JSON.stringify(options.json)};
  }
  const response = await fetch(path, {...options, headers});
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("The API refused the token: " + (body.message || "401"));
  }
  if (!response.ok) throw new Error(body.message || `the API answered ${response.status}`);
  return body;
}

/** Every item of a list route, following next_cursor (at most `pages` pages of 200). */
async function listAll(path, pages = 10) {
  const items = [];
  let cursor = null;
  for (let n = 0; n < pages; n++) {
    const query = new URLSearchParams({limit: "200"});
    if (cursor) query.set("cursor", cursor);
    const listed = await api(`${path}?${query}`);
    items.push(...listed.items);
    cursor = listed.next_cursor;
    if (!cursor) break;
  }
  return items;
}

const agentNames = new Map(); // agent id -> name, filled on demand and kept for the tab

/** Names for these agent ids, asking the API again only when one is unknown. */
async function namesOf(ids) {
  if (ids.some(id => !agentNames.has(id))) {
    for (const agent of await listAll("/v1/agents")) agentNames.set(agent.id, agent.name);
    for (const id of ids) if (!agentNames.has(id)) agentNames.set(id, shortId(id)); // deleted
  }
  return agentNames;
}

/** Run fn now and again every ms after it finishes; refresh() runs it at once. */
function poller(ms, fn) {
  let timer = null, stopped = false, running = false;
  async function tick() {
    clearTimeout(timer);
    if (running || stopped) return;
    running = true;
    try { await fn(); showError(""); } catch (err) { if (!stopped) showError(err.message); }
    running = false;
    if (!stopped) timer = setTimeout(tick, ms);
  }
  tick();
  return {refresh: tick, stop() { stopped = true; clearTimeout(timer); }};
}

/** Replace a container's content only when the data changed (so buttons stay put). */
function redraw(container, data, draw) {
  const key = JSON.stringify(data);
  if (container.dataset.key !== key) {
    container.dataset.key = key;
    container.replaceChildren(...draw(data));
  }
}

/** A table's head row. */
function headRow(names) {
  return el("thead", {}, el("tr", {}, ...names.map(name => el("th", {}, name))));
}

/** A button that disables itself while its action runs and reports a refusal. */
function actionButton(label, attrs, action) {
  return el("button", {type: "button", ...attrs, async onclick(event) {
    const button = event.currentTarget;
    button.disabled = true;
    try { await action(); } catch (err) { showError(err.message); }
    button.disabled = false;
  }}, label);
}

// --- routing ---------------------------------------------------------------------------------

const ROUTES = [
  [new RegExp(`^#/runs/(${UUID})$`), match => runPage(match[1]), "runs"],
  [new RegExp(`^#/schedules/(${UUID})$`), match => schedulePage(match[1]), "schedules"],
  [/^#\/schedules\/?$/, () => schedulesPage(), "schedules"],
  [/^#\/agents\/?$/, () => agentsPage(), "agents"],
];

function route() {
  if (page) page.stop();
  page = null;
  showError("");
  notify();
  if (!sessionStorage.getItem(TOKEN_KEY)) return showLogin();
  document.getElementById("forget").hidden = false;
  document.getElementById("nav").hidden = false;
  for (const [pattern, open, section] of ROUTES) {
    const match = location.hash.match(pattern);
    if (match) {
      markSection(section);
      page = open(match);
      return;
    }
  }
  markSection("runs");
  const query = location.hash.match(/^#\/?\?(.*)$/);
  page = homePage(new URLSearchParams(query ? query[1] : ""));
}

function markSection(section) {
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.dataset.section === section) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function showLogin(message) {
  if (page) page.stop();
  page = null;
  document.getElementById("forget").hidden = true;
  document.getElementById("nav").hidden = true;
  const input = el("input", {id: "token", type: "password", autocomplete: "off", required: ""});
  const form = el("form", {id: "login", onsubmit(event) {
    event.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    route();
  }},
  el("label", {for: "token"}, "Operator token"), input, el("button", {type: "submit"}, "Open"),
  el("p", {class: "hint"},
    "Kept in this tab only. `tickwork token create --tenant NAME` makes one."));
  main.replaceChildren(form);
  if (message) showError(message);
  input.focus();
}

document.getElementById("forget").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  agentNames.clear();
  showLogin();
});
window.addEventListener("hashchange", route);
// Deferred scripts run in order before DOMContentLoaded: every page's script is loaded by then.
document.addEventListener("DOMContentLoaded", route);
