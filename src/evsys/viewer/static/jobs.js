// The job list and the comparison of two jobs.
import { h, link, fmt, when, table, section, getJSON, enc } from "./dom.js";

function passk(p) {
  if (!p) return "–";
  return Object.entries(p).map(([k, v]) => `@${k} ${fmt(v)}`).join(", ");
}

// A job's state as a badge: only a job whose result.json says complete is "done" (green).
const STATUS_BADGE = { done: "badge ok", "running/stopped": "badge run", incomplete: "badge run", cancelled: "badge bad", unreadable: "badge bad" };
const STATUS_TEXT = { done: "done", "running/stopped": "running/stopped", incomplete: "incomplete", cancelled: "cancelled", unreadable: "result.json unreadable" };
const STATUSES = ["done", "cancelled", "incomplete", "running/stopped", "unreadable"];

// Kept across the page's refreshes while a job runs.
const listFilter = { text: "", status: "" };
const listSort = { index: null, dir: 1 };

function jobMatches(job, f) {
  if (f.status && job.state !== f.status) return false;
  if (!f.text) return true;
  const needle = f.text.toLowerCase();
  return [job.name, ...job.agents, ...job.models, ...job.datasets].some((v) => v.toLowerCase().includes(needle));
}

export async function jobsPage() {
  const data = await getJSON("/api/jobs");
  if (data.single) location.replace(`#/job/${enc(data.single)}`);
  const picked = [];
  const compareButton = h("button", { disabled: true, onclick: () => {
    location.hash = `#/compare/${enc(picked[0])}/${enc(picked[1])}`;
  } }, "compare the two selected jobs");
  const pick = (name) => h("input", { type: "checkbox", title: "select to compare", checked: picked.includes(name), onchange: (e) => {
    if (e.target.checked) picked.push(name); else picked.splice(picked.indexOf(name), 1);
    compareButton.disabled = picked.length !== 2;
  } });
  const columns = [
    { label: "", get: (j) => pick(j.name), sort: () => 0 },
    { label: "job", get: (j) => link(`#/job/${enc(j.name)}`, j.name), sort: (j) => j.name },
    { label: "started", get: (j) => when(j.started_at), sort: (j) => j.started_at || "" },
    { label: "state", get: (j) => h("span", { class: STATUS_BADGE[j.state] || "badge run" }, STATUS_TEXT[j.state] || j.state), sort: (j) => j.state },
    { label: "agents", get: (j) => j.agents.join(", ") },
    { label: "models", get: (j) => j.models.join(", ") || "–" },
    { label: "datasets", get: (j) => j.datasets.join(", ") || "–" },
    { label: "trials", cls: "num", get: (j) => (j.n_planned && j.n_planned !== j.n_trials ? `${j.n_trials}/${j.n_planned}` : String(j.n_trials)), sort: (j) => j.n_trials },
    { label: "mean", cls: "num", get: (j) => fmt(j.mean_reward), sort: (j) => j.mean_reward },
    { label: "pass@k", get: (j) => passk(j.pass_at_k) },
    { label: "errors", cls: "num", get: (j) => (j.n_errors ? h("span", { class: "bad" }, String(j.n_errors)) : "0"), sort: (j) => j.n_errors },
  ];
  const holder = h("div");
  const draw = () => {
    const shown = data.jobs.filter((j) => jobMatches(j, listFilter));
    holder.replaceChildren(h("p", { class: "muted", id: "job-count" }, `${shown.length} of ${data.jobs.length} jobs`),
      table(columns, shown, { id: "jobs", sortState: listSort }));
  };
  const bar = h("div", { class: "filters" },
    h("label", {}, "filter ", h("input", { id: "f-jobs", type: "search", value: listFilter.text, placeholder: "job, agent, model or dataset",
      oninput: (e) => { listFilter.text = e.target.value; draw(); } })),
    h("label", {}, "state ", h("select", { id: "f-status", onchange: (e) => { listFilter.status = e.target.value; draw(); } },
      h("option", { value: "" }, "all"), STATUSES.map((v) => h("option", { value: v, selected: v === listFilter.status }, v)))));
  draw();
  const node = h("div", {},
    h("h1", {}, "jobs"),
    data.jobs.length ? [bar, holder] : h("p", { class: "muted" }, "no job directories here yet"),
    h("p", {}, compareButton));
  return { node, title: "evsys jobs", live: data.jobs.some((j) => j.running) };
}

export async function comparePage(a, b) {
  const data = await getJSON(`/api/diff?a=${enc(a)}&b=${enc(b)}`);
  const delta = (r) => {
    if (r.delta === null) return "–";
    const cls = r.delta > 1e-9 ? "good" : r.delta < -1e-9 ? "bad" : "muted";
    return h("span", { class: cls }, `${r.delta > 0 ? "+" : ""}${fmt(r.delta)}`);
  };
  const columns = [
    { label: "task", get: (r) => r.task },
    { label: "agent", get: (r) => r.agent },
    { label: "model", get: (r) => r.model || "–" },
    { label: data.a, cls: "num", get: (r) => `${fmt(r.a)} (${r.n_a})`, sort: (r) => r.a },
    { label: data.b, cls: "num", get: (r) => `${fmt(r.b)} (${r.n_b})`, sort: (r) => r.b },
    { label: "Δ", cls: "num", get: delta, sort: (r) => r.delta },
  ];
  const both = data.rows.filter((r) => r.delta !== null);
  const better = both.filter((r) => r.delta > 1e-9).length, worse = both.filter((r) => r.delta < -1e-9).length;
  const node = h("div", {},
    h("h1", {}, "compare ", link(`#/job/${enc(data.a)}`, data.a), " → ", link(`#/job/${enc(data.b)}`, data.b)),
    h("p", {}, `${both.length} rows in both jobs: ${better} better, ${worse} worse, ${both.length - better - worse} unchanged. Rewards are means over attempts (trials in brackets).`),
    section("per-task reward", table(columns, data.rows, { id: "diff" })));
  return { node, title: `${data.a} ↔ ${data.b}`, live: false };
}
