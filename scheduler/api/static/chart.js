// The home page's chart: runs per minute over the last hour as stacked bars by outcome, an
// inline SVG drawn here (no chart library, nothing from another origin). Colours come from
// app.css classes: the page's policy forbids inline styles.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
// Stacking order, bottom up: good news first, then what is still going, then what went wrong.
const OUTCOMES = ["done", "question", "waiting", "running", "queued", "stalled_out", "timed_out",
  "hard_stop", "failed", "cancelled"];
const CHART = {width: 720, height: 150, left: 34, right: 6, top: 10, bottom: 22};

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children) {
    if (child == null) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

/** A CSS-safe name for an outcome (they are a fixed set; anything else is "other"). */
function outcomeClass(outcome) {
  return OUTCOMES.includes(outcome) ? outcome : "other";
}

function ordered(counts) {
  const known = OUTCOMES.filter(outcome => counts[outcome]);
  const rest = Object.keys(counts).filter(outcome => !OUTCOMES.includes(outcome)).sort();
  return [...known, ...rest].map(outcome => [outcome, counts[outcome]]);
}

/** A round, even top for the y axis (1, 2, 4, 6, 8, 10, 20, 40…) at or above the busiest
 * minute, so its half is a whole count too. */
function axisTop(peak) {
  for (let step = 1; ; step *= 10) {
    for (const top of [1, 2, 4, 6, 8].map(n => n * step)) if (top >= peak) return top;
  }
}

function hhmm(text) {
  return new Date(text).toLocaleTimeString([], {hour: "2-digit", minute: "2-digit",
    hourCycle: "h23"});
}

/** The section's children: heading, the chart, and a legend with the hour's totals. */
function activityChart(stats) {
  const items = stats.items, totals = {};
  let peak = 0;
  for (const item of items) {
    let sum = 0;
    for (const [outcome, n] of Object.entries(item.counts)) {
      sum += n;
      totals[outcome] = (totals[outcome] || 0) + n;
    }
    peak = Math.max(peak, sum);
  }
  const all = Object.values(totals).reduce((a, b) => a + b, 0);
  const heading = el("h2", {}, `Runs per minute, last ${items.length === 60 ? "hour" :
    `${items.length} minutes`}`, el("span", {class: "muted", id: "activity-total"},
    ` · ${count(all)} run${all === 1 ? "" : "s"}`));
  const legend = el("ul", {class: "legend"}, ...ordered(totals).map(([outcome, n]) =>
    el("li", {"data-outcome": outcome}, el("span", {class: `swatch bar-${outcomeClass(outcome)}`}),
      `${outcome.replace("_", " ")} ${count(n)}`)));
  return [heading, chartSvg(items, axisTop(Math.max(peak, 1))),
    all ? legend : el("p", {class: "empty"}, "No runs in this hour.")];
}

function chartSvg(items, top) {
  const {width, height, left, right, bottom} = CHART;
  const plotTop = CHART.top, plotHeight = height - plotTop - bottom;
  const slot = (width - left - right) / items.length;
  const y = n => plotTop + plotHeight - (n / top) * plotHeight;
  const chart = svg("svg", {id: "activity-chart", viewBox: `0 0 ${width} ${height}`,
    role: "img", "aria-label": "runs per minute by outcome, last hour"});
  for (const mark of [0, top / 2, top]) {
    if (mark !== Math.round(mark)) continue; // a half of 1 is no count of runs
    chart.append(
      svg("line", {class: "grid", x1: left, x2: width - right, y1: y(mark), y2: y(mark)}),
      svg("text", {class: "axis", x: left - 6, y: y(mark) + 4, "text-anchor": "end"},
        String(mark)));
  }
  items.forEach((item, index) => {
    const x = left + index * slot;
    const total = Object.values(item.counts).reduce((a, b) => a + b, 0);
    const column = svg("g", {"data-minute": item.minute, "data-total": total});
    let base = 0;
    for (const [outcome, n] of ordered(item.counts)) {
      column.append(svg("rect", {class: `bar bar-${outcomeClass(outcome)}`, "data-outcome": outcome,
        "data-count": n, x: x + 1, width: Math.max(slot - 2, 1), y: y(base + n),
        height: y(base) - y(base + n)}));
      base += n;
    }
    const words = ordered(item.counts).map(([outcome, n]) => `${n} ${outcome}`).join(", ");
    // A full-height, see-through target so the tooltip shows for short bars too.
    column.append(svg("rect", {class: "hover", x, width: slot, y: plotTop, height: plotHeight},
      svg("title", {}, `${hhmm(item.minute)}: ${words || "no runs"}`)));
    chart.append(column);
    if (index % 15 === 0 || index === items.length - 1) {
      const label = index === items.length - 1 ? "now" : hhmm(item.minute);
      chart.append(svg("text", {class: "axis", x: x + slot / 2, y: height - 6,
        "text-anchor": index === items.length - 1 ? "end" : "middle"}, label));
    }
  });
  return chart;
}
