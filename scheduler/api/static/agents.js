// The agents page: each agent's status, its tools (and which of them wait for a person), what
// it may do without asking (auto-approve) and its own limits, with links to its schedules'
// count and runs.
"use strict";

function agentsPage() {
  const list = el("section", {id: "agent-list"});
  main.replaceChildren(el("h1", {}, "Agents"), el("p", {class: "muted"},
    "Read tools run on their own; any other tool waits for a person's approval unless the " +
    "agent auto-approves it. Local tools (update_plan, read_file, query_file) belong to every " +
    "agent."), list);
  const poll = poller(REFRESH_MS * 3, async () => {
    const [agents, catalog, schedules] = await Promise.all([listAll("/v1/agents"),
      api("/v1/tools"), listAll("/v1/schedules")]);
    for (const agent of agents) agentNames.set(agent.id, agent.name);
    const classes = new Map(catalog.items.map(tool => [tool.key,
      tool.is_local ? "local" : tool.tool_class]));
    const scheduled = new Map();
    for (const s of schedules) scheduled.set(s.agent_id, (scheduled.get(s.agent_id) || 0) + 1);
    redraw(list, [agents, catalog.items, [...scheduled]], () => [agentTable(agents, classes,
      scheduled)]);
  });
  return poll;
}

function agentTable(agents, classes, scheduled) {
  if (!agents.length) {
    return el("p", {class: "empty"}, "No agents yet. `tickwork agent apply FILE` makes one.");
  }
  const names = ["agent", "status", "tools", "auto-approve", "limits", "schedules", ""];
  return el("table", {id: "agents"}, headRow(names),
    el("tbody", {}, ...agents.map(agent => el("tr", {"data-agent": agent.id},
      el("td", {class: "name"}, el("b", {}, agent.name),
        agent.instructions ?
          el("div", {class: "muted instructions"}, short(agent.instructions, 90)) : null),
      el("td", {class: "status", "data-status": agent.status}, agent.status),
      el("td", {class: "tools"}, toolChips(agent, classes)),
      el("td", {class: "auto-approve"}, agent.auto_approve.length ?
        agent.auto_approve.map(key => el("span", {class: "chip"}, key)) :
        el("span", {class: "muted"}, "none")),
      el("td", {class: "limits"}, agentLimits(agent)),
      el("td", {class: "schedules"}, String(scheduled.get(agent.id) || 0)),
      el("td", {}, el("a", {href: `#/?agent=${agent.id}`}, "runs"))))));
}

/** The agent's own settings, each over the deployment's default ("defaults": none set). */
function agentLimits(agent) {
  const shown = [
    agent.model != null ? `model ${agent.model}` : null,
    agent.timeout_minutes != null ? `${agent.timeout_minutes} min timeout` : null,
    agent.max_tool_calls != null ? `${agent.max_tool_calls} tool calls` : null,
    agent.token_budget != null ? `${agent.token_budget.toLocaleString("en")} tokens` : null,
    agent.max_concurrent_runs != null ? `${agent.max_concurrent_runs} at once` : null,
  ].filter(Boolean);
  return shown.length ? shown.map(text => el("span", {class: "chip"}, text)) :
    el("span", {class: "muted", title: "the deployment's TICKWORK_* settings"}, "defaults");
}

/** One chip per tool; those that will wait for approval are marked (and say why on hover). */
function toolChips(agent, classes) {
  if (!agent.tools.length) return el("span", {class: "muted"}, "local tools only");
  return agent.tools.map(key => {
    const kind = classes.get(key) || "unknown";
    const asks = !["read", "local"].includes(kind) && !agent.auto_approve.includes(key);
    return el("span", {class: asks ? "chip asks" : "chip", "data-tool": key,
      title: asks ? `${kind}: waits for a person's approval` : ["read", "local"].includes(kind) ?
        `${kind}: runs on its own` : `${kind}: auto-approved`}, key, asks ? " ‖" : null);
  });
}
