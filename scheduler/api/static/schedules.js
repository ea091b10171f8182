// The schedules pages: every schedule with when it fires (in the browser's zone, and as its
// author wrote it), next and last run, pause/resume and run now; and one schedule's history,
// where the fires that got no run of their own (coalesced, skipped) are shown with why.
"use strict";

const DAY_NAMES = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]; // cron numbering
const DAY_MINUTES = 1440, WEEK_MINUTES = 10080;
// Why a fire got no run of its own, in words (skipped_fires.reason).
const SKIPS = {
  coalesced: ["coalesced", "Missed while no tick ran (the scheduler was down or late): the run " +
    "beside it stands for it, instead of one late run per missed fire."],
  overlap: ["skipped: still running", "The run beside it had not finished, and this " +
    "schedule skips a fire while its last run is still going."],
  agent_inactive: ["skipped: agent inactive", "The agent was paused or a draft when it was due, " +
    "so nothing ran."],
};

function hhmmOf(minutes) {
  const m = ((minutes % DAY_MINUTES) + DAY_MINUTES) % DAY_MINUTES;
  return `${String(Math.floor(m / 60)).padStart(2, "0")}:${String(m % 60).padStart(2, "0")}`;
}

/** A stored UTC cron in words in the browser's zone, as scheduler/localtime.describe does for
 * the CLI: the cron is the truth and the display only says which shape to show. */
function describeLocal(cron, display) {
  const offset = -new Date().getTimezoneOffset(); // minutes east of UTC, now
  const parsed = parseCron(cron);
  const frequency = (display || {}).frequency;
  let text = null;
  if (parsed) {
    const [minute, hours, days] = parsed;
    if (frequency === "daily" && !days && hours && hours.length === 1) {
      text = "daily at " + hhmmOf(hours[0] * 60 + minute + offset);
    } else if (frequency === "weekly" && days && hours && hours.length === 1) {
      text = weeklyText(hours[0] * 60 + minute, days, offset);
    } else if (frequency === "hourly" && !days) {
      text = hourlyText(minute, hours, offset);
    }
  }
  if (text) return `${text} (${localZone()})`;
  // Minute steps read the same in every zone.
  const step = String(cron).trim().match(/^(\*|\*\/(\d+)) \* \* \* \*$/);
  if (step) return step[2] && step[2] !== "1" ? `every ${Number(step[2])} minutes` : "every minute";
  return `cron ${cron} (UTC)`;
}

function weeklyText(utcMinute, days, offset) {
  const local = days.map(d => ((d * DAY_MINUTES + utcMinute + offset) % WEEK_MINUTES +
    WEEK_MINUTES) % WEEK_MINUTES);
  if (new Set(local.map(m => m % DAY_MINUTES)).size !== 1) return null;
  const names = [...new Set(local.map(m => Math.floor(m / DAY_MINUTES)))].sort((a, b) =>
    (a + 6) % 7 - (b + 6) % 7).map(d => DAY_NAMES[d]);
  return `weekly on ${names.join(",")} at ${hhmmOf(local[0])}`;
}

function hourlyText(minute, hours, offset) {
  if (!hours) return `every hour at :${hhmmOf(minute + offset).slice(3)}`;
  const n = 24 / hours.length;
  const even = [1, 2, 3, 4, 6, 8, 12].includes(n) && hours.every((h, i) => h === hours[0] + i * n);
  if (!even) return null;
  const first = Math.min(...hours.map(h => ((h * 60 + minute + offset) % DAY_MINUTES +
    DAY_MINUTES) % DAY_MINUTES));
  return `every ${n} hours from ${hhmmOf(first)}`;
}

/** [minute, hours or null for "*", weekdays or null for "*"] for the shapes the CLI writes. */
function parseCron(cron) {
  const fields = String(cron).trim().split(/\s+/);
  if (fields.length !== 5 || fields[2] !== "*" || fields[3] !== "*" || !/^\d+$/.test(fields[0])) {
    return null;
  }
  const list = (field, top) => field === "*" ? null : field.split(",").every(p => /^\d+$/.test(p) &&
    Number(p) <= top) ? [...new Set(field.split(",").map(Number))].sort((a, b) => a - b) : [];
  const hours = list(fields[1], 23), days = list(fields[4], 7);
  if (Number(fields[0]) > 59 || (hours && !hours.length) || (days && !days.length)) return null;
  return [Number(fields[0]), hours, days && [...new Set(days.map(d => d % 7))].sort()];
}

/** The display descriptor in words: the schedule as its author typed it, in their zone then. */
function asWritten(display) {
  if (!display || !display.frequency || display.frequency === "cron") return "as a cron";
  if (display.frequency === "daily") return `daily at ${display.time_of_day}`;
  if (display.frequency === "weekly") {
    return `weekly on ${(display.days_of_week || []).join(",")} at ${display.time_of_day}`;
  }
  const n = display.interval_hours;
  return n === 1 ? "every hour" : `every ${n} hours`;
}

function scheduleActions(schedule, changed) {
  const paused = schedule.status === "paused";
  return [
    actionButton(paused ? "Resume" : "Pause", {class: paused ? "resume" : "pause"}, async () => {
      await api(`/v1/schedules/${schedule.id}`,
        {method: "PATCH", json: {status: paused ? "active" : "paused"}});
      notify(`Schedule ${shortId(schedule.id)} ${paused ? "resumed" : "paused"}.`);
      changed();
    }),
    actionButton("Run now", {class: "run-now"}, async () => {
      const run = await api(`/v1/schedules/${schedule.id}/run-now`, {method: "POST"});
      notify("Run ", el("a", {href: `#/runs/${run.id}`}, shortId(run.id)), " queued.");
      changed();
    }),
  ];
}

function nextRun(schedule) {
  if (schedule.status === "paused") return "paused";
  return [whenShort(schedule.next_run), el("span", {class: "rel"}, relative(schedule.next_run))];
}

function lastRun(schedule) {
  if (!schedule.last_run) return "never";
  return [whenShort(schedule.last_run), el("span", {class: "rel"}, relative(schedule.last_run))];
}

function schedulesPage() {
  const list = el("section", {id: "schedule-list"});
  main.replaceChildren(el("h1", {}, "Schedules"), el("p", {class: "muted"},
    `Times are in your zone, ${localZone()}. "As written" is how the schedule was typed, in ` +
    "its author's zone."), list);
  const poll = poller(REFRESH_MS * 2, async () => {
    const schedules = await listAll("/v1/schedules");
    const agents = await namesOf(schedules.map(s => s.agent_id));
    // Redrawn every time, so "in 4 min" moves.
    list.replaceChildren(scheduleTable(schedules, agents, poll.refresh));
  });
  return poll;
}

function scheduleTable(schedules, agents, changed) {
  if (!schedules.length) {
    return el("p", {class: "empty"}, "No schedules yet. `tickwork schedule add` makes one.");
  }
  const names = ["agent", "when (your time)", "as written", "cron (UTC)", "next run", "last run",
    "status", ""];
  return el("table", {id: "schedules"}, headRow(names),
    el("tbody", {}, ...schedules.map(s => el("tr", {"data-schedule": s.id},
      el("td", {}, agents.get(s.agent_id) || s.agent_id),
      el("td", {class: "when"},
        el("a", {href: `#/schedules/${s.id}`}, describeLocal(s.cron, s.display))),
      el("td", {class: "written"}, asWritten(s.display)),
      el("td", {}, el("code", {}, s.cron)),
      el("td", {class: "next"}, nextRun(s)),
      el("td", {class: "last"}, lastRun(s)),
      el("td", {class: "status", "data-status": s.status}, s.status),
      el("td", {class: "actions"}, el("div", {}, ...scheduleActions(s, changed)))))));
}

// --- one schedule and its history --------------------------------------------------------------

function schedulePage(id) {
  const facts = el("section", {id: "schedule-facts"});
  const history = el("section", {id: "history"});
  main.replaceChildren(el("h1", {}, "schedule ", el("code", {}, id)), facts, history);
  const poll = poller(REFRESH_MS * 2, async () => {
    const [schedule, fires] = await Promise.all([api(`/v1/schedules/${id}`),
      api(`/v1/schedules/${id}/history?limit=200`)]);
    const agents = await namesOf([schedule.agent_id]);
    facts.replaceChildren(scheduleFacts(schedule, agents.get(schedule.agent_id)),
      el("p", {class: "actions"}, ...scheduleActions(schedule, poll.refresh),
        el("a", {href: `#/?schedule=${id}`}, "its runs")));
    redraw(history, fires.items, historyView);
  });
  return poll;
}

function scheduleFacts(s, agent) {
  const rows = [["agent", agent], ["when (your time)", describeLocal(s.cron, s.display)],
    ["as written", asWritten(s.display)], ["cron (UTC)", s.cron], ["status", s.status],
    ["next run", nextRun(s)], ["last run", lastRun(s)],
    ["if still running", s.overlap === "skip" ? "skip the fire" : "start another run"],
    ["time limit", `${s.timeout_minutes} min`]];
  return el("dl", {class: "facts"}, ...rows.map(([term, value]) =>
    [el("dt", {}, term), el("dd", {}, typeof value === "object" ? value : String(value ?? ""))]));
}

/** The history: a summary of what happened to the fires shown, then one row per fire. */
function historyView(items) {
  const tally = {ran: 0, manual: 0, retries: 0, coalesced: 0, overlap: 0, agent_inactive: 0};
  for (const h of items) {
    if (h.kind !== "execution") tally[h.reason] = (tally[h.reason] || 0) + 1;
    else if (h.reason === "manual") tally.manual += 1;
    else if ((h.attempt || 1) > 1) tally.retries += 1;
    else tally.ran += 1;
  }
  const parts = [[tally.ran, "ran on time"], [tally.manual, "run now"], [tally.retries, "retries"],
    [tally.coalesced, "coalesced"], [tally.overlap, "skipped while still running"],
    [tally.agent_inactive, "skipped while the agent was inactive"]].filter(([n]) => n);
  const summary = el("p", {id: "history-summary"}, items.length ? parts.map(([n, what]) =>
    el("span", {class: "tally"}, el("b", {}, String(n)), ` ${what}`)) : "Nothing has fired yet.");
  if (!items.length) return [el("h2", {}, "History"), summary];
  const names = ["fire (your time)", "what happened", "run", "result", "why"];
  return [el("h2", {}, "History"), summary, el("table", {id: "history-table"},
    headRow(names),
    el("tbody", {}, ...items.map(historyRow)))];
}

function historyRow(h) {
  const runLink = h.execution_id ?
    el("a", {href: `#/runs/${h.execution_id}`}, shortId(h.execution_id)) : "—";
  const fired = whenShort(h.scheduled_for || h.recorded_at);
  if (h.kind !== "execution") {
    const [label, why] = SKIPS[h.reason] || [`skipped: ${h.reason}`, ""];
    return el("tr", {class: "skipped", "data-kind": h.kind, "data-reason": h.reason},
      el("td", {}, fired), el("td", {}, el("span", {class: `badge ${h.reason}`}, label)),
      el("td", {}, runLink), el("td", {class: "muted"}, "no run of its own"),
      el("td", {class: "why"}, why));
  }
  const label = h.reason === "manual" ? "run now" :
    (h.attempt || 1) > 1 ? `retry (attempt ${h.attempt})` : "ran";
  const why = h.fires > 1 ? `One run for ${h.fires} fires: the ${h.fires - 1} missed before it ` +
    "were coalesced into it." :
    h.reason === "manual" ? "Started by hand; the schedule was not moved." : "";
  const result = h.outcome ? `${h.status} · ${h.outcome}` : h.status || "";
  return el("tr", {class: "execution", "data-kind": "execution", "data-reason": h.reason},
    el("td", {}, fired), el("td", {}, el("span", {class: "badge ran"}, label)),
    el("td", {}, runLink), el("td", {class: "status", "data-status": h.status || ""}, result),
    el("td", {class: "why"}, why));
}
