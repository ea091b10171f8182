// The tickwork run viewer: recent runs, a run's live tree, pending approvals. Plain JS, no build.
// Everything the API returns is inserted as text (text nodes, textContent), never as HTML:
// journal text comes from models and tools and is hostile.
"use strict";

const TOKEN_KEY = "tickwork.token";
const REFRESH_MS = 3000;
const EVENT_TYPES = ["run_start", "step_start", "reasoning_delta", "tool_start", "tool_complete",
  "content_delta", "budget_refusal", "gate_decision", "approval_required", "run_complete",
  "model_usage", "context_masked"];
// The CLI's marks, except WAITING: its "⏸" has no glyph in common monospace fonts.
const OK = "✓", FAILED = "✗", RUNNING = "…", WAITING = "‖", AGAIN = "↻", ASKS = "?";
const GATE_MARKS = {done: OK, plan_complete: OK, question: ASKS, stalled: AGAIN, plan_open: AGAIN,
  stalled_out: FAILED, hard_stop: FAILED, cancelled: FAILED};
const MARK_STATES = {[OK]: "ok", [FAILED]: "failed", [RUNNING]: "running", [WAITING]: "waiting"};
const TERMINAL = ["completed", "failed", "cancelled"];

const main = document.getElementById("main");
let page = null; // the open page's {stop()}: its timers and its event source

// --- helpers -----------------------------------------------------------------------------

/** An element; string children become text nodes, null children are skipped. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
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

function when(text) {
  return text ? new Date(text).toLocaleString() : "—";
}

function showError(message) {
  const box = document.getElementById("error");
  box.textContent = message || "";
  box.hidden = !message;
}

async function api(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY);
  const headers = {Accept: "application/json", Authorization: `Bearer ${token}`};
  const response = await fetch(path, {...options, headers});
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin("The API refused the token: " + (body.message || "401"));
  }
  if (!response.ok) throw new Error(body.message || `the API answered ${response.status}`);
  return body;
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

// --- pages and routing ---------------------------------------------------------------------

function route() {
  if (page) page.stop();
  page = null;
  showError("");
  if (!sessionStorage.getItem(TOKEN_KEY)) return showLogin();
  document.getElementById("forget").hidden = false;
  const match = location.hash.match(/^#\/runs\/([0-9a-f-]{36})$/);
  page = match ? runPage(match[1]) : homePage();
}

function showLogin(message) {
  if (page) page.stop();
  page = null;
  document.getElementById("forget").hidden = true;
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

function homePage() {
  const approvals = el("section", {id: "approvals"});
  const runs = el("section", {id: "runs"});
  main.replaceChildren(approvals, runs);
  const agents = new Map();
  const poll = poller(REFRESH_MS, async () => {
    const [listed, pending] = await Promise.all([api("/v1/runs?limit=50"), pendingApprovals()]);
    if (listed.items.some(run => !agents.has(run.agent_id))) {
      const known = (await api("/v1/agents?limit=200")).items;
      for (const agent of known) agents.set(agent.id, agent.name);
      for (const run of listed.items) if (!agents.has(run.agent_id)) agents.set(run.agent_id, "?");
    }
    redraw(approvals, pending, items => approvalList(items, "Pending approvals", poll.refresh));
    // Redrawn every time, so the durations of running runs move.
    runs.replaceChildren(el("h2", {}, "Recent runs"), runTable(listed.items, agents));
  });
  return poll;
}

async function pendingApprovals() {
  return (await api("/v1/approvals?status=pending&limit=200")).items;
}

function runTable(runs, agents) {
  if (!runs.length) return el("p", {class: "empty"}, "No runs yet.");
  const names = ["run", "status", "agent", "trigger", "started", "duration", "outcome",
    "tokens in / out"];
  const head = el("tr", {}, ...names.map(name => el("th", {}, name)));
  const rows = runs.map(run => el("tr", {"data-run": run.id},
    el("td", {}, el("a", {href: `#/runs/${run.id}`}, shortId(run.id))),
    el("td", {class: "status", "data-status": statusOf(run)}, statusOf(run)),
    el("td", {}, agents.get(run.agent_id) || run.agent_id),
    el("td", {}, trigger(run)),
    el("td", {}, when(run.started_at)),
    el("td", {}, runDuration(run)),
    el("td", {}, run.outcome || ""),
    el("td", {class: "usage"}, tokens(run.usage))));
  return el("table", {}, el("thead", {}, head), el("tbody", {}, ...rows));
}

/** A run's tokens for the table, as `tickwork runs` shows them; empty before any model call. */
function tokens(usage) {
  if (!usage || !usage.model_calls) return "";
  return `${count(usage.input_tokens)} / ${count(usage.output_tokens)}`;
}

/** A run's usage in words, as `tickwork tail` ends with it. */
function usageText(usage) {
  if (!usage || !(usage.input_tokens || usage.output_tokens)) return "";
  const calls = usage.model_calls;
  return `${count(usage.input_tokens)} tokens in, ${count(usage.output_tokens)} out, ` +
    `${calls} model call${calls === 1 ? "" : "s"}`;
}

function count(n) {
  return Number(n || 0).toLocaleString("en-US");
}

function trigger(run) {
  return [run.trigger_type, run.trigger_source].filter(Boolean).join(" · ");
}

function statusOf(run) {
  return run.breadcrumb === "suspended" ? "waiting for approval" : run.status;
}

function runDuration(run) {
  if (!run.started_at) return "";
  const ended = run.finished_at && run.breadcrumb !== "suspended";
  const end = ended ? Date.parse(run.finished_at) : Date.now();
  return duration((end - Date.parse(run.started_at)) / 1000);
}

function approvalList(items, title, changed, withRun = true) {
  if (!items.length) return [];
  return [el("h2", {}, title), el("ul", {class: "approvals"}, ...items.map(item => {
    const decide = verdict => async event => {
      const buttons = event.target.parentElement.querySelectorAll("button");
      for (const button of buttons) button.disabled = true;
      const path = `/v1/approvals/${encodeURIComponent(item.id)}/${verdict}`;
      try { await api(path, {method: "POST"}); } catch (err) { showError(err.message); }
      changed();
    };
    return el("li", {"data-approval": item.id},
      el("span", {class: "tool"}, `${item.tool}(${short(pyJson(item.arguments ?? {}), 200)})`),
      withRun ? el("a", {href: `#/runs/${item.execution_id}`}, `run ${shortId(item.execution_id)}`) : null,
      el("button", {type: "button", class: "approve", onclick: decide("approve")}, "Approve"),
      el("button", {type: "button", class: "reject", onclick: decide("reject")}, "Reject"));
  }))];
}

// --- the run page ---------------------------------------------------------------------------

function runPage(id) {
  const view = newView(id);
  const meta = el("p", {id: "run-meta"});
  const approvals = el("section", {id: "run-approvals"});
  const title = el("h1", {}, "run ", el("code", {}, id), " · ", view.status);
  main.replaceChildren(title, meta, approvals, el("ul", {id: "tree", class: "tree"}, view.root.li),
    view.answer);
  let agent = null;
  const poll = poller(REFRESH_MS, async () => {
    const [run, pending] = await Promise.all([api(`/v1/runs/${id}`), pendingApprovals()]);
    agent = agent || await api(`/v1/agents/${run.agent_id}`).then(a => a.name, () => run.agent_id);
    meta.textContent = [`agent ${agent}`, trigger(run), `started ${when(run.started_at)}`,
      runDuration(run), run.outcome || "", usageText(run.usage)].filter(Boolean).join("  ·  ");
    const mine = pending.filter(item => item.execution_id === id);
    redraw(approvals, mine, items => approvalList(items, "Waiting for you", poll.refresh, false));
    if (view.done && !mine.length) poll.stop(); // nothing on this page changes any more
  });
  const tail = follow(view, () => poll.refresh());
  return {stop() { poll.stop(); tail.stop(); }};
}

/** The run's journal through the browser's own EventSource. The browser reconnects by itself
 * after a drop and sends Last-Event-ID; when it gives up (a non-200 answer, e.g. 401 once the
 * ticket has expired), we get a new ticket and reopen from the last seq we drew. */
function follow(view, changed) {
  let source = null, stopped = false, delay = 500;
  function onEvent(message) {
    let event;
    try { event = JSON.parse(message.data); } catch { return; }
    applyEvent(view, event);
    delay = 500;
    if (event.type === "approval_required" || event.type === "run_complete") changed();
    if (event.type === "run_complete") stop();
  }
  async function open() {
    if (stopped) return;
    try {
      const {ticket} = await api(`/v1/runs/${view.id}/stream-ticket`, {method: "POST"});
      const query = new URLSearchParams({ticket});
      if (view.last) query.set("after", view.last);
      if (stopped) return;
      source = new EventSource(`/v1/runs/${view.id}/events?${query}`);
      for (const type of EVENT_TYPES) source.addEventListener(type, onEvent);
      source.onerror = () => (source.readyState === EventSource.CLOSED ? reopen() : settle());
    } catch (err) {
      reopen();
    }
  }
  function reopen() {
    if (source) source.close();
    if (stopped) return;
    setTimeout(open, delay);
    delay = Math.min(delay * 2, 10000);
  }
  // The stream closed without run_complete (e.g. a queued run was cancelled): if the run has
  // ended, draw what is stored and stop instead of reconnecting forever.
  async function settle() {
    try {
      const run = await api(`/v1/runs/${view.id}`);
      if (!TERMINAL.includes(run.status) || run.breadcrumb === "suspended") return;
      const stored = await api(`/v1/runs/${view.id}/events?after=${view.last}`);
      stored.items.forEach(event => applyEvent(view, event));
      stop();
      changed();
    } catch { /* the API is unreachable: the browser keeps reconnecting */ }
  }
  function stop() {
    stopped = true;
    if (source) source.close();
  }
  open();
  return {stop};
}

// --- the tree: each event hangs under its parent_seq, as in `tickwork tail` ---------------------

class Node {
  constructor(kind, mark, text) {
    this.kind = kind;
    this.mark = el("span", {class: "mark"}, mark);
    this.text = el("span", {class: "text"}, text);
    this.li = el("li", {class: kind}, this.mark, this.text);
    this.list = null;
    this.setMark(mark);
  }
  add(child) {
    if (!this.list) this.li.append(this.list = el("ul"));
    this.list.append(child.li);
    return child;
  }
  setMark(mark) {
    this.mark.textContent = mark;
    this.li.dataset.state = MARK_STATES[mark] || "";
  }
}

function newView(id) {
  return {id, last: 0, root: new Node("run", "", `run ${id}`), nodes: new Map(), tools: new Map(),
    approvals: new Map(), waiting: false, done: false, answerParent: undefined,
    status: el("span", {id: "run-status"}, "waiting to start"),
    answer: el("div", {id: "answer", class: "answer"})};
}

function setStatus(view, text) {
  view.status.textContent = text;
}

function applyEvent(view, event) {
  if (event.seq <= view.last) return; // drawn already (a replay after a reconnect)
  view.last = event.seq;
  const payload = event.payload || {};
  const parent = view.nodes.get(event.parent_seq) || view.root;
  if (view.waiting && event.type !== "approval_required") {
    view.waiting = false;
    setStatus(view, "running"); // resumed after the approval
  }
  if (event.type === "model_usage") {
    // Accounting, not a step of the run: the page shows the run's stored usage instead.
  } else if (event.type === "run_start") {
    view.nodes.set(event.seq, view.root);
    setStatus(view, "running");
    if ((payload.attempt || 1) > 1) {
      view.root.text.textContent = `run ${view.id} (attempt ${payload.attempt})`;
    }
  } else if (event.type === "tool_complete") {
    let tool = view.nodes.get(event.parent_seq);
    if (!tool || tool.kind !== "tool") tool = view.tools.get(String(payload.call_id));
    if (tool) {
      completeTool(tool, payload, event.ts);
      view.nodes.set(event.seq, tool);
    }
  } else if (event.type === "content_delta") {
    const newPart = view.answer.textContent && event.parent_seq !== view.answerParent;
    if (newPart) view.answer.append("\n\n");
    view.answer.append(String(payload.text || ""));
    view.answerParent = event.parent_seq;
  } else {
    const node = parent.add(makeNode(event, payload));
    view.nodes.set(event.seq, node);
    afterNode(view, event.type, payload, node);
  }
}

function afterNode(view, type, payload, node) {
  if (type === "tool_start") {
    view.tools.set(String(payload.call_id), node);
    resolveApproval(view, payload, true);
  } else if (type === "budget_refusal" && payload.wall === "approval_rejected") {
    resolveApproval(view, payload, false);
  } else if (type === "approval_required") {
    view.approvals.set(String(payload.call_id), [node, payload]);
    view.waiting = true;
    setStatus(view, "waiting for approval");
  } else if (type === "run_complete") {
    view.done = true;
    setStatus(view, String(payload.outcome || payload.status || "ended"));
  }
}

function makeNode(event, p) {
  switch (event.type) {
    case "step_start": {
      const node = new Node("step", "", `step ${p.turn ?? "?"}`);
      if (p.turn_warning) node.add(new Node("note", "!", short(p.turn_warning)));
      return node;
    }
    case "reasoning_delta":
      return new Node("reasoning", "·", short(p.text || ""));
    case "tool_start": {
      const node = new Node("tool", RUNNING, callText(p));
      node.started = event.ts;
      return node;
    }
    case "budget_refusal": {
      const node = new Node("refusal", FAILED, `${p.tool} refused by the ${p.wall} wall`);
      node.text.title = String(p.message ?? ""); // what the model was told
      return node;
    }
    case "gate_decision": {
      let text = `gate: ${p.verdict}`;
      if (p.reason) text += `: ${short(p.reason)}`;
      if (p.units_left != null) text += ` (${p.units_left} units left)`;
      const node = new Node("gate", GATE_MARKS[p.verdict] || ASKS, text);
      if (p.injected) node.add(new Node("note", "", `told the model: ${short(p.injected)}`));
      return node;
    }
    case "approval_required":
      return new Node("approval", WAITING, `waiting for approval: ${callText(p)}`);
    case "run_complete": {
      const outcome = p.outcome || p.status || "ended";
      let text = String(outcome) + (p.reason ? `: ${short(p.reason)}` : "");
      if (p.retry_id) text += ` (retried as run ${p.retry_id})`;
      return new Node("end", outcome === "done" ? OK : FAILED, text);
    }
    default:
      return new Node("event", "", String(event.type));
  }
}

function completeTool(tool, p, finished) {
  tool.setMark(p.ok ? OK : FAILED);
  const details = [];
  // As in the CLI: journal ts is when a batch was stored, so a gap under 1 ms means "not
  // measured" and shows nothing; a duration_ms in the payload wins.
  const took = tool.started && finished ? (micros(finished) - micros(tool.started)) / 1e6 : 0;
  if (typeof p.duration_ms === "number") details.push(duration(p.duration_ms / 1000));
  else if (took >= 0.001) details.push(duration(took));
  if (p.result_chars != null) details.push(`${p.result_chars} chars`);
  if (p.replayed) details.push("replayed");
  if (details.length) tool.text.textContent += `  ${details.join(", ")}`;
}

/** Microseconds since the epoch from an RFC 3339 stamp (Date.parse stops at milliseconds). */
function micros(stamp) {
  const fraction = (String(stamp).match(/\.(\d+)/) || ["", ""])[1].padEnd(6, "0");
  return Date.parse(stamp) * 1000 + Number(fraction.slice(3, 6));
}

function resolveApproval(view, p, approved) {
  const key = String(p.call_id);
  const [node, asked] = view.approvals.get(key) || [];
  if (!node) return;
  view.approvals.delete(key);
  node.setMark(approved ? OK : FAILED);
  node.text.textContent = (approved ? "approved: " : "rejected: ") + callText(asked);
}

function callText(p) {
  const args = p.arguments && Object.keys(p.arguments).length ? pyJson(p.arguments) : "";
  return `${p.tool}(${short(args, 80)})`;
}

/** JSON as Python's json.dumps(sort_keys=True) writes it, so the tree reads as the CLI's. */
function pyJson(value) {
  if (Array.isArray(value)) return `[${value.map(pyJson).join(", ")}]`;
  if (value && typeof value === "object") {
    const pairs = Object.keys(value).sort()
      .map(key => `${JSON.stringify(key)}: ${pyJson(value[key])}`);
    return `{${pairs.join(", ")}}`;
  }
  return JSON.stringify(value);
}

document.getElementById("forget").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  showLogin();
});
window.addEventListener("hashchange", route);
route();
