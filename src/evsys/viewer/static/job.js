// The job page: summary per (agent, model, dataset), charts, per-task matrix, filterable trial list.
import { h, link, fmt, secs, when, table, section, getJSON, enc } from "./dom.js";
import { rewardHistogram, passAtK, phaseBars, groupLabel } from "./charts.js";

const filters = {}; // per job: kept across refreshes of a running job
const sorts = {};

function summaryTable(groups) {
  const columns = [
    { label: "agent", get: (g) => g.agent },
    { label: "model", get: (g) => g.model || "–" },
    { label: "dataset", get: (g) => g.dataset },
    { label: "trials", cls: "num", get: (g) => String(g.n_trials), sort: (g) => g.n_trials },
    { label: "errors", get: (g) => Object.entries(g.errors_by_cause).map(([c, n]) => `${c} ${n}`).join(", ") || "0", sort: (g) => g.n_errors },
    { label: "findings", get: (g) => (g.n_with_findings ? `${g.n_with_findings} (${Object.entries(g.findings_by_kind).map(([k, n]) => `${k} ${n}`).join(", ")})` : "0"), sort: (g) => g.n_with_findings },
    { label: "mean reward", cls: "num", get: (g) => fmt(g.mean_reward), sort: (g) => g.mean_reward },
    { label: "per key", get: (g) => Object.entries(g.reward_means).filter(([k]) => k !== "reward").map(([k, v]) => `${k} ${fmt(v)}`).join(", ") || "–" },
    { label: "pass@k", get: (g) => Object.entries(g.pass_at_k || {}).map(([k, v]) => `@${k} ${fmt(v)}`).join(", ") || "–" },
    { label: "tokens in/out", cls: "num", get: (g) => `${g.usage.prompt_tokens}/${g.usage.completion_tokens}` },
    { label: "cost $", cls: "num", get: (g) => (g.usage.cost_usd === null ? "unknown" : fmt(g.usage.cost_usd, 4)), sort: (g) => g.usage.cost_usd ?? -1 },
    { label: "wall s", cls: "num", get: (g) => fmt(g.wall_time_sec, 1), sort: (g) => g.wall_time_sec },
  ];
  return table(columns, groups, { id: "summary" });
}

function cellClass(value) {
  if (value === null) return "cell";
  return value >= 0.999 ? "cell hi" : value <= 0.001 ? "cell lo" : "cell mid";
}

// Mean reward per task and (agent, model) over attempts, with the failure causes seen.
function taskMatrix(trials) {
  const cols = [...new Set(trials.map((t) => (t.model ? `${t.agent} · ${t.model}` : t.agent)))].sort();
  const tasks = [...new Set(trials.map((t) => t.task_name))].sort();
  const cell = {};
  for (const t of trials) {
    const key = `${t.task_name}\u0000${t.model ? `${t.agent} · ${t.model}` : t.agent}`;
    (cell[key] = cell[key] || []).push(t);
  }
  const head = h("tr", {}, h("th", {}, "task"), cols.map((c) => h("th", {}, c)));
  const rows = tasks.map((task) => h("tr", {}, h("td", {}, task), cols.map((c) => {
    const ts = (cell[`${task}\u0000${c}`] || []).filter((t) => !t.failure || t.failure.cause !== "cancelled");
    if (!ts.length) return h("td", { class: "cell" }, "–");
    const mean = ts.reduce((a, t) => a + (t.reward ?? 0), 0) / ts.length;
    const causes = [...new Set(ts.filter((t) => t.failure).map((t) => t.failure.cause))];
    return h("td", { class: cellClass(mean), title: `${ts.length} trial(s)` }, fmt(mean), causes.length ? h("small", {}, ` ${causes.join(", ")}`) : null);
  })));
  return h("table", { id: "matrix" }, h("thead", {}, head), h("tbody", {}, rows));
}

function select(label, values, current, onchange, id) {
  return h("label", {}, label, " ", h("select", { id, onchange: (e) => onchange(e.target.value) },
    h("option", { value: "" }, "all"), values.map((v) => h("option", { value: v, selected: v === current }, v))));
}

function applyFilters(trials, f) {
  return trials.filter((t) => {
    if (f.task && !t.task_name.toLowerCase().includes(f.task.toLowerCase())) return false;
    if (f.agent && t.agent !== f.agent) return false;
    if (f.model && (t.model || "–") !== f.model) return false;
    const cause = t.failure ? t.failure.cause : "ok";
    if (f.cause === "failed" ? cause === "ok" : f.cause && cause !== f.cause) return false;
    const r = t.reward ?? 0;
    if (f.min !== "" && f.min !== undefined && r < Number(f.min)) return false;
    if (f.max !== "" && f.max !== undefined && r > Number(f.max)) return false;
    return true;
  });
}

function trialsSection(job) {
  const f = (filters[job.name] = filters[job.name] || { task: "", agent: "", model: "", cause: "", min: "", max: "" });
  const sortState = (sorts[job.name] = sorts[job.name] || { index: null, dir: 1 });
  const holder = h("div");
  const agents = [...new Set(job.trials.map((t) => t.agent))].sort();
  const models = [...new Set(job.trials.map((t) => t.model || "–"))].sort();
  const causes = ["ok", "failed", ...new Set(job.trials.filter((t) => t.failure).map((t) => t.failure.cause))];
  const columns = [
    { label: "trial", get: (t) => link(`#/job/${enc(job.name)}/trial/${enc(t.trial_name)}`, t.trial_name), sort: (t) => t.trial_name },
    { label: "task", get: (t) => t.task_name },
    { label: "agent", get: (t) => t.agent },
    { label: "model", get: (t) => t.model || "–" },
    { label: "#", cls: "num", get: (t) => String(t.attempt), sort: (t) => t.attempt },
    { label: "reward", cls: "num", get: (t) => fmt(t.reward), sort: (t) => t.reward ?? -Infinity },
    { label: "cause", get: (t) => (t.failure ? h("span", { class: "badge bad" }, t.failure.cause) : h("span", { class: "badge ok" }, "ok")), sort: (t) => (t.failure ? t.failure.cause : "") },
    { label: "message", cls: "msg", get: (t) => (t.failure ? t.failure.message.split("\n")[0] : "") },
    { label: "total", cls: "num", get: (t) => secs(t.timing.total), sort: (t) => t.timing.total ?? -1 },
    { label: "findings", get: (t) => ((t.integrity || []).length ? h("span", { class: "badge bad", title: t.integrity.map((x) => `${x.kind}: ${x.evidence}`).join("\n") }, [...new Set(t.integrity.map((x) => x.kind))].join(", ")) : ""), sort: (t) => (t.integrity || []).length },
  ];
  const draw = () => {
    const shown = applyFilters(job.trials, f);
    holder.replaceChildren(h("p", { class: "muted", id: "trial-count" }, `${shown.length} of ${job.trials.length} trials`),
      table(columns, shown, { id: "trials", sortState }));
  };
  const set = (key) => (value) => { f[key] = value; draw(); };
  const bar = h("div", { class: "filters" },
    h("label", {}, "task ", h("input", { id: "f-task", type: "search", value: f.task, placeholder: "name contains", oninput: (e) => set("task")(e.target.value) })),
    select("agent", agents, f.agent, set("agent"), "f-agent"),
    select("model", models, f.model, set("model"), "f-model"),
    select("cause", causes, f.cause, set("cause"), "f-cause"),
    h("label", {}, "reward ≥ ", h("input", { id: "f-min", type: "number", step: "any", value: f.min, oninput: (e) => set("min")(e.target.value) })),
    h("label", {}, "≤ ", h("input", { id: "f-max", type: "number", step: "any", value: f.max, oninput: (e) => set("max")(e.target.value) })));
  draw();
  return section("trials", bar, holder);
}

export async function jobPage(name) {
  const job = await getJSON(`/api/jobs/${enc(name)}`);
  const scored = job.trials.filter((t) => !t.failure || t.failure.cause !== "cancelled");
  const state = job.state === "unreadable"
    ? h("span", { class: "badge bad" }, "result.json unreadable")
    : job.running
    ? h("span", { class: "badge run" }, job.complete ? "finished" : "running (or stopped before the end)")
    : h("span", { class: job.complete ? "badge ok" : job.state === "cancelled" ? "badge bad" : "badge run" },
      job.complete ? "complete" : job.state === "cancelled" ? "cancelled (resume to finish)" : "finished, incomplete");
  const planned = job.n_planned || job.trials.length + job.pending.length;
  const node = h("div", {},
    h("h1", {}, job.name, " ", state),
    h("p", { class: "muted" }, `started ${when(job.started_at)} · finished ${when(job.finished_at)} · ${job.trials.length} of ${planned} trials have a result · ${job.n_errors} failed`),
    job.config_error ? h("p", { class: "error" }, job.config_error) : null,
    job.result_error ? h("p", { class: "error" }, job.result_error) : null,
    section("summary", summaryTable(job.metrics),
      job.metrics.length ? h("div", { class: "charts" }, rewardHistogram(scored.map((t) => t.reward ?? 0)), passAtK(job.metrics), phaseBars(job.metrics)) : null),
    job.trials.length ? section("reward per task (mean over attempts)", taskMatrix(job.trials)) : null,
    trialsSection(job),
    job.pending.length ? section("trials without a result", h("ul", {}, job.pending.map((p) => h("li", {}, link(`#/job/${enc(job.name)}/trial/${enc(p.name)}`, p.name), ` — ${p.problem}`)))) : null);
  return { node, title: `${job.name} · evsys`, live: job.running };
}

export { groupLabel };
