// The runs pages: the home page (pending approvals, the runs-per-minute chart, the runs list
// with its filters and cursor paging) and one run's page (live tree, usage, approvals, cancel).
"use strict";

// As the API shows them: "waiting" is a run waiting for a person (GET /v1/runs?status=waiting).
const RUN_STATUSES = ["queued", "running", "waiting", "completed", "failed", "cancelled"];
// The "since" filter's choices, in minutes; the API takes an RFC 3339 UTC time made from them.
const SINCE = [["", "any time"], ["15m", "last 15 minutes", 15], ["1h", "last hour", 60],
  ["24h", "last 24 hours", 1440], ["7d", "last 7 days", 10080]];
const PAGE_SIZE = 50;

function homePage(filters) {
  const approvals = el("section", {id: "approvals"});
  const activity = el("section", {id: "activity"});
  const list = el("div", {id: "run-list"});
  const pager = el("nav", {class: "pager"});
  const runs = el("section", {id: "runs"}, el("h2", {}, "Runs"), filterForm(filters), list,
    pager);
  main.replaceChildren(approvals, activity, runs);
  const cursors = [null]; // the cursor of every page seen; the last one is the page shown
  let next = null;
  const poll = poller(REFRESH_MS, async () => {
    const [listed, pending, stats] = await Promise.all([
      api(`/v1/runs?${runQuery(filters, cursors[cursors.length - 1])}`), pendingApprovals(),
      api("/v1/stats/runs-per-minute?minutes=60")]);
    const agents = await namesOf(listed.items.map(run => run.agent_id));
    redraw(approvals, pending, items => approvalList(items, "Pending approvals", poll.refresh));
    redraw(activity, stats, activityChart);
    // Redrawn every time, so the durations of running runs move.
    const filtered = [...filters.keys()].length > 0;
    list.replaceChildren(runTable(listed.items, agents, filtered));
    next = listed.next_cursor;
    drawPager();
  });
  function drawPager() {
    const newer = cursors.length > 1 ? el("button", {type: "button", class: "newer", onclick() {
      cursors.pop();
      poll.refresh();
    }}, "← Newer") : null;
    const older = next ? el("button", {type: "button", class: "older", onclick() {
      cursors.push(next);
      poll.refresh();
    }}, "Older →") : null;
    const where = cursors.length > 1 ?
      el("span", {class: "muted"}, `page ${cursors.length}`) : null;
    pager.replaceChildren(...[newer, where, older].filter(Boolean));
  }
  return poll;
}

/** The /v1/runs query for these filters (status, agent, schedule, since) and page cursor. */
function runQuery(filters, cursor) {
  const query = new URLSearchParams({limit: String(PAGE_SIZE)});
  if (filters.get("status")) query.set("status", filters.get("status"));
  if (filters.get("agent")) query.set("agent_id", filters.get("agent"));
  if (filters.get("schedule")) query.set("schedule_id", filters.get("schedule"));
  const since = SINCE.find(([key]) => key && key === filters.get("since"));
  if (since) query.set("since", new Date(Date.now() - since[2] * 60000).toISOString());
  if (cursor) query.set("cursor", cursor);
  return query;
}

/** The filters as a form; a change goes to the URL (#/?status=failed…), so views can be shared. */
function filterForm(filters) {
  const choice = (name, label, pairs) => el("label", {},
    el("span", {}, label),
    el("select", {name, onchange: apply}, ...optionsOf(pairs, filters.get(name))));
  const form = el("form", {id: "filters", onsubmit: event => event.preventDefault()},
    choice("status", "status", [["", "any"], ...RUN_STATUSES.map(s => [s, s])]),
    // The chosen agent and schedule are options at once (their names follow with fillChoices),
    // so a filter changed before the names arrive keeps them.
    choice("agent", "agent", idChoices([], filters.get("agent"))),
    choice("schedule", "schedule", idChoices([], filters.get("schedule"))),
    choice("since", "since", SINCE.map(([key, text]) => [key, text])),
    // The form is emptied at the click, not only when the new page is drawn, so a choice made
    // before then is not added to the filters just cleared.
    el("a", {href: "#/", class: "clear", hidden: [...filters.keys()].length ? null : "",
      onclick() { for (const select of form.querySelectorAll("select")) select.value = ""; }},
      "clear filters"));
  function apply() {
    const chosen = new URLSearchParams();
    for (const select of form.querySelectorAll("select")) {
      if (select.value) chosen.set(select.name, select.value);
    }
    location.hash = chosen.toString() ? `#/?${chosen}` : "#/";
  }
  fillChoices(form, filters).catch(err => showError(err.message));
  return form;
}

/** The agent and schedule choices come from the API (names, schedules in local time). */
async function fillChoices(form, filters) {
  const [agents, schedules] = await Promise.all([listAll("/v1/agents"), listAll("/v1/schedules")]);
  for (const agent of agents) agentNames.set(agent.id, agent.name);
  const options = {
    agent: agents.map(agent => [agent.id, agent.name]),
    schedule: schedules.map(s => [s.id, `${agentNames.get(s.agent_id) || shortId(s.agent_id)} · ` +
      describeLocal(s.cron, s.display)]),
  };
  for (const [name, pairs] of Object.entries(options)) {
    const select = form.querySelector(`select[name=${name}]`);
    const wanted = filters.get(name);
    select.replaceChildren(...optionsOf(idChoices(pairs, wanted), wanted));
    select.value = wanted || "";
  }
}

/** An id filter's choices: any, the pairs, and the chosen id under its short form when the pairs
 * lack it (names not loaded yet, or a deleted agent or schedule). */
function idChoices(pairs, wanted) {
  const missing = wanted && !pairs.some(([value]) => value === wanted);
  return [["", "any"], ...pairs, ...(missing ? [[wanted, shortId(wanted)]] : [])];
}

/** <option>s for [value, text] pairs, the wanted value selected. */
function optionsOf(pairs, wanted) {
  return pairs.map(([value, text]) => el("option", {value, selected: value === wanted || null},
    text));
}

async function pendingApprovals() {
  return (await api("/v1/approvals?status=pending&limit=200")).items;
}

function runTable(runs, agents, filtered) {
  if (!runs.length) {
    return el("p", {class: "empty"}, filtered ? "No runs match these filters." : "No runs yet.");
  }
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

function trigger(run) {
  return [run.trigger_type, run.trigger_source].filter(Boolean).join(" · ");
}

function statusOf(run) {
  if (run.breadcrumb === "parked") return "running (model unavailable, retrying)"; // as the CLI
  return run.status === "waiting" ? "waiting for approval" : run.status;
}

/** A run that a person may still cancel: not ended, or ended its turn waiting for approval. */
function cancellable(run) {
  return !TERMINAL.includes(run.status) || run.breadcrumb === "suspended";
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
      withRun ?
        el("a", {href: `#/runs/${item.execution_id}`}, `run ${shortId(item.execution_id)}`) : null,
      el("button", {type: "button", class: "approve", onclick: decide("approve")}, "Approve"),
      el("button", {type: "button", class: "reject", onclick: decide("reject")}, "Reject"));
  }))];
}

// --- the run page ---------------------------------------------------------------------------

function runPage(id) {
  const view = newView(id);
  const meta = el("p", {id: "run-meta"});
  const actions = el("p", {id: "run-actions"});
  const approvals = el("section", {id: "run-approvals"});
  const title = el("h1", {}, "run ", el("code", {}, id), " · ", view.status);
  main.replaceChildren(title, meta, actions, approvals,
    el("ul", {id: "tree", class: "tree"}, view.root.li), view.answer);
  let agent = null, asked = false; // asked: this page requested the cancel
  const poll = poller(REFRESH_MS, async () => {
    const [run, pending] = await Promise.all([api(`/v1/runs/${id}`), pendingApprovals()]);
    agent = agent || await api(`/v1/agents/${run.agent_id}`).then(a => a.name, () => run.agent_id);
    meta.textContent = [`agent ${agent}`, trigger(run), `started ${when(run.started_at)}`,
      runDuration(run), run.outcome || "", usageText(run.usage)].filter(Boolean).join("  ·  ");
    redraw(actions, [run.schedule_id, cancellable(run), asked], () => [
      cancellable(run) ? cancelButton(id, asked, () => { asked = true; poll.refresh(); }) : null,
      run.schedule_id ? el("a", {href: `#/schedules/${run.schedule_id}`}, "its schedule") : null,
    ].filter(Boolean));
    if (run.breadcrumb === "suspended" && !view.done && !view.waiting) {
      view.waiting = true; // the row is the truth; the journal may not have said so yet
      setStatus(view, "waiting for approval");
    }
    const mine = pending.filter(item => item.execution_id === id);
    redraw(approvals, mine, items => approvalList(items, "Waiting for you", poll.refresh, false));
    if (view.done && !mine.length && !cancellable(run)) poll.stop(); // nothing changes any more
  });
  const tail = follow(view, () => poll.refresh());
  return {stop() { poll.stop(); tail.stop(); }};
}

/** Cancel, after the browser's own confirmation: a running run stops at its next turn. */
function cancelButton(id, asked, done) {
  if (asked) return el("button", {type: "button", id: "cancel", disabled: ""}, "Cancel requested");
  return actionButton("Cancel run", {id: "cancel", class: "danger"}, async () => {
    const sure = window.confirm(`Cancel run ${shortId(id)}? A queued run or one waiting for ` +
      "approval ends now; a running one stops at its next turn. This cannot be undone.");
    if (!sure) return;
    await api(`/v1/runs/${id}/cancel`, {method: "POST"});
    notify(`Run ${shortId(id)}: cancel requested.`);
    done();
  });
}
