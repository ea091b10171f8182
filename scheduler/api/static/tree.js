// The viewer's live run tree: each journal event hangs under its parent_seq, as in
// `tickwork tail`, fed by the browser's own EventSource with a single-use stream ticket.
// Journal text comes from models and tools and is hostile: it goes in as text only.
"use strict";

// The CLI's marks, except WAITING: its "⏸" has no glyph in common monospace fonts.
const OK = "✓", FAILED = "✗", RUNNING = "…", WAITING = "‖", AGAIN = "↻", ASKS = "?";
const GATE_MARKS = {done: OK, plan_complete: OK, question: ASKS, stalled: AGAIN, plan_open: AGAIN,
  stalled_out: FAILED, hard_stop: FAILED, cancelled: FAILED};
const MARK_STATES = {[OK]: "ok", [FAILED]: "failed", [RUNNING]: "running", [WAITING]: "waiting"};
const EVENT_TYPES = ["run_start", "step_start", "reasoning_delta", "tool_start", "tool_complete",
  "content_delta", "budget_refusal", "gate_decision", "approval_required", "run_complete",
  "model_usage", "context_masked", "context_compacted", "provider_wait"];

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
    case "provider_wait": // parked through a model outage, no worker held
      return new Node("wait", AGAIN,
        `model unavailable (wait ${p.attempt ?? "?"}): trying again at ${p.until}: ${short(p.reason || "")}`);
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
