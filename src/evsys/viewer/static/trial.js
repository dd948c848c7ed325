// The trial page: outcome, traceback, timing, instruction, every step (with a token view for model turns),
// verifier output, logs. Everything from the trial is inserted as text.
import { h, fmt, secs, when, pre, section, getJSON, enc } from "./dom.js";

const EAGER_TOKENS = 2000; // longer completions render their token boxes when opened
const PHASES = ["sandbox_start", "agent_early", "agent_setup", "agent_run", "verifier", "logs_download", "sandbox_stop"];

function outcome(r) {
  if (!r) return h("p", { class: "error" }, "no valid result.json (the trial is running, or its result is broken)");
  const keys = Object.entries(r.rewards || {}).map(([k, v]) => `${k} ${fmt(v)}`).join(", ");
  return h("div", { class: "outcome" },
    h("div", { class: "big" }, h("span", { class: "muted" }, "reward "), fmt(r.reward)),
    h("dl", {},
      h("dt", {}, "task"), h("dd", {}, `${r.task_name} (${r.dataset})`),
      h("dt", {}, "agent"), h("dd", {}, r.model ? `${r.agent} · ${r.model}` : r.agent),
      h("dt", {}, "attempt"), h("dd", {}, String(r.attempt)),
      h("dt", {}, "rewards"), h("dd", {}, keys || "–"),
      h("dt", {}, "outcome"), h("dd", {}, r.failure ? h("span", { class: "badge bad", id: "cause" }, r.failure.cause) : h("span", { class: "badge ok" }, "ok")),
      h("dt", {}, "integrity"), h("dd", {}, (r.integrity || []).length ? h("a", { class: "badge bad", href: "#integrity", onclick: (e) => {
        e.preventDefault();
        document.getElementById("integrity")?.scrollIntoView();
      } }, `${r.integrity.length} finding(s)`) : h("span", { class: "badge ok" }, "no findings")),
      h("dt", {}, "tokens in/out"), h("dd", {}, `${r.usage.prompt_tokens}/${r.usage.completion_tokens}`),
      h("dt", {}, "started"), h("dd", {}, when(r.started_at)),
      h("dt", {}, "sandbox"), h("dd", {}, `${r.sandbox_name || "–"}${r.sandbox_reused ? " (reset, reused)" : ""}`)),
    r.failure ? pre(r.failure.message, "failure") : null);
}

// What the trial tried against its grader: one row per finding (kind, evidence, the part of evsys that saw it).
function findings(r) {
  if (!r || !(r.integrity || []).length) return null;
  return section(`integrity findings (${r.integrity.length})`,
    h("p", { class: "muted" }, "what the trial tried against its grader; a trainer zeroes, screens or only flags such samples (docs/security.md)"),
    h("table", { id: "integrity" },
      h("thead", {}, h("tr", {}, ["kind", "evidence", "seen by"].map((c) => h("th", {}, c)))),
      h("tbody", {}, r.integrity.map((f) => h("tr", { class: "finding" },
        h("td", {}, h("span", { class: "badge bad" }, f.kind)), h("td", {}, pre(f.evidence, "evidence")), h("td", {}, f.source || "–"))))));
}

function timing(r) {
  if (!r) return null;
  const total = r.timing.total || PHASES.reduce((a, p) => a + (r.timing[p] || 0), 0) || 1;
  return section("timing per phase", h("div", { class: "phases" }, PHASES.filter((p) => r.timing[p] != null).map((p) =>
    h("div", { class: "phase" }, h("span", { class: "pname" }, p),
      h("span", { class: "ptrack" }, h("span", { class: "pbar", style: { width: `${Math.max(0.5, (100 * r.timing[p]) / total)}%` } })),
      h("span", { class: "pval" }, secs(r.timing[p]))))),
  h("p", { class: "muted" }, `total ${secs(r.timing.total)}`));
}

// Probability -> a background from red (unlikely) to green (likely).
function tokenColor(logprob) {
  if (logprob === null || logprob === undefined) return "#e5e7eb";
  const p = Math.exp(Math.max(-20, logprob));
  return `hsl(${Math.round(120 * p)}, 75%, ${Math.round(82 - 10 * p)}%)`;
}

// A token's text made visible: spaces as "·", newlines as "↵", tabs as "→" (the title keeps the id).
function visible(text) {
  return text === "" ? "∅" : text.replace(/ /g, "·").replace(/\n/g, "↵").replace(/\t/g, "→");
}

function tokenView(m, texts) {
  const ids = m.completion_token_ids || [];
  const lps = m.logprobs || [];
  const mask = m.loss_mask || [];
  const spans = () => ids.map((id, i) => h("span", {
    class: `tok${mask[i] === 0 ? " masked" : ""}`,
    title: `token ${i}: id ${id}${texts ? ` ${JSON.stringify(texts[i])}` : ""} · logprob ${lps[i] === undefined ? "–" : fmt(lps[i], 4)} · p ${lps[i] === undefined ? "–" : fmt(Math.exp(lps[i]), 3)} · loss mask ${mask[i] ?? "–"}`,
    style: { background: tokenColor(lps[i]) },
  }, texts ? visible(texts[i] ?? "") : String(id)));
  const learned = mask.filter((x) => x === 1).length;
  return h("div", { class: "tokens" },
    h("div", { class: "muted" }, `completion: ${ids.length} tokens · loss mask ${learned}/${mask.length || 0} learned${texts ? "" : " · token ids (no tokenizer found for this model: evsys view --tokenizer shows text)"} · colour = sampling probability (red low, green high) · dashed = loss mask 0 · hover for id and logprob`),
    ids.length <= EAGER_TOKENS
      ? h("div", { class: "tokrow completion" }, spans())
      : lazyDetails({ class: "prompt", "data-key": `completion-${m.__step}` }, `show ${ids.length} tokens`,
        () => h("div", { class: "tokrow completion" }, spans())));
}

// A <details> whose body is built the first time it opens (long prompts would otherwise cost a node per token).
function lazyDetails(attrs, summary, build) {
  const body = h("div");
  const d = h("details", { ...attrs, ontoggle: () => {
    if (d.open && !body.childNodes.length) body.append(build());
  } }, h("summary", {}, summary), body);
  return d;
}

function promptView(m) {
  const ids = m.prompt_token_ids;
  if (!ids) return null;
  const at = m.prefix_break_at;
  const broke = m.extends_previous === false;
  const build = () => h("div", { class: "tokrow" }, ids.map((id, i) =>
    h("span", { class: `ptok${broke && i === at ? " break" : broke && i > at ? " after" : ""}` }, String(id))));
  return lazyDetails({ class: "prompt", "data-key": `prompt-${m.__step}` },
    `prompt: ${ids.length} tokens${m.extends_previous === true ? " · extends the previous turn" : ""}`, build);
}

function prefixBanner(m) {
  if (m.extends_previous !== false) return null;
  return h("div", { class: "prefix-break" },
    `prefix break: this turn's prompt does not extend the previous turn's prompt + completion (first differing token at index ${m.prefix_break_at ?? "?"}); a trainer must not flatten across it`);
}

function stepCard(step, texts) {
  const m = step.metrics || null;
  const extra = [];
  if (step.model_name) extra.push(`model ${step.model_name}`);
  if (step.proxy_call_index !== undefined) extra.push(`proxy call #${step.proxy_call_index}`);
  if (step.latency_s !== undefined && step.latency_s !== null) extra.push(`latency ${secs(step.latency_s)}`);
  if (m && (m.prompt_tokens || m.completion_tokens)) extra.push(`tokens ${m.prompt_tokens ?? 0}/${m.completion_tokens ?? 0}`);
  const results = (step.observation && step.observation.results) || [];
  if (m) m.__step = step.step_id;
  return h("article", { class: `step ${step.source}`, id: `step-${step.step_id}` },
    h("header", {}, h("span", { class: `src ${step.source}` }, step.source), ` step ${step.step_id}`,
      h("span", { class: "muted" }, ` · ${when(step.timestamp)}${extra.length ? " · " + extra.join(" · ") : ""}`)),
    m ? prefixBanner(m) : null,
    step.reasoning_content ? h("details", { class: "reasoning", "data-key": `r-${step.step_id}` }, h("summary", {}, "reasoning"), pre(step.reasoning_content)) : null,
    step.message ? pre(step.message, "message") : null,
    (step.tool_calls || []).map((c) => h("div", { class: "call" }, h("span", { class: "fn" }, `→ ${c.function_name}`), h("span", { class: "muted" }, ` ${c.tool_call_id}`),
      pre(JSON.stringify(c.arguments, null, 2), "args"))),
    results.map((r) => h("div", { class: "obs" }, h("span", { class: "muted" }, `← ${r.source_call_id || "observation"}`),
      pre(typeof r.content === "string" ? r.content : JSON.stringify(r.content, null, 2)))),
    m && m.completion_token_ids ? tokenView(m, texts[step.step_id]) : null,
    m ? promptView(m) : null);
}

// The capture graph: one training sequence per path of calls linked by exact token prefix.
function sequenceTable(seqs) {
  const link = (id) => h("a", { href: `#step-${id}`, onclick: (e) => {
    e.preventDefault();
    document.getElementById(`step-${id}`)?.scrollIntoView();
  } }, String(id));
  const opened = (b) => b ? `${b.kind} at step ${b.step_id}${b.closest_node !== null ? ` · shares ${b.common_prefix_tokens} tokens with call ${b.closest_node}` : ""}` : "first";
  return h("div", {},
    h("p", { class: "muted" }, "model calls linked by exact token prefix: each path of calls is one training row; retries, sub-agents and compactions open new ones"),
    h("table", { id: "sequences" },
      h("thead", {}, h("tr", {}, ["sequence", "steps", "prompt", "completion", "learned", "opened by"].map((c) => h("th", {}, c)))),
      h("tbody", {}, seqs.map((s) => h("tr", { class: "sequence" },
        h("td", {}, String(s.index)),
        h("td", {}, s.step_ids.flatMap((id, i) => (i ? [", ", link(id)] : [link(id)]))),
        h("td", {}, String(s.prompt_tokens)), h("td", {}, String(s.completion_tokens)), h("td", {}, String(s.learned_tokens)),
        h("td", { class: s.opened_by ? "break" : "" }, opened(s.opened_by)))))));
}

function logList(trial) {
  if (!trial.logs.length) return h("p", { class: "muted" }, "no files");
  return h("div", {}, trial.logs.map((f) => {
    const body = h("div");
    const d = h("details", { class: "log", "data-key": `log-${f.path}`, ontoggle: async () => {
      if (!d.open || body.childNodes.length) return;
      try {
        const file = await getJSON(`/api/jobs/${enc(trial.job)}/trials/${enc(trial.name)}/file?path=${enc(f.path)}`);
        body.replaceChildren(pre(file.text), file.truncated ? h("p", { class: "muted" }, `cut at ${file.text.length} of ${file.size} bytes`) : "");
      } catch (err) {
        body.replaceChildren(h("p", { class: "error" }, err.message));
      }
    } }, h("summary", {}, `${f.path} (${f.size} bytes)`), body);
    return d;
  }));
}

export async function trialPage(job, name) {
  const trial = await getJSON(`/api/jobs/${enc(job)}/trials/${enc(name)}`);
  const r = trial.result;
  const steps = trial.trajectory ? trial.trajectory.steps : [];
  const tools = trial.trajectory && trial.trajectory.agent.tool_definitions;
  const node = h("div", {},
    h("h1", {}, trial.name),
    trial.problems.length ? h("ul", { class: "error" }, trial.problems.map((p) => h("li", {}, p))) : null,
    section("outcome", outcome(r)),
    findings(r),
    trial.exception ? section("exception.txt", pre(trial.exception.text, "traceback")) : null,
    r && r.retries.length ? section("earlier tries", r.retries.map((f) => pre(`${f.at} ${f.cause}: ${f.message}`))) : null,
    r && r.warnings.length ? section("warnings", h("ul", {}, r.warnings.map((w) => h("li", {}, w)))) : null,
    timing(r),
    trial.instruction !== null ? section("instruction", pre(trial.instruction, "instruction")) : null,
    tools && tools.length ? h("details", { class: "card", "data-key": "tools" }, h("summary", {}, `tool definitions (${tools.length})`), pre(JSON.stringify(tools, null, 2))) : null,
    section(`steps (${steps.length})`, steps.length ? steps.map((step) => stepCard(step, trial.token_texts || {})) : h("p", { class: "muted" }, "no trajectory")),
    trial.sequences && trial.sequences.length ? section(`training sequences (${trial.sequences.length})`, sequenceTable(trial.sequences)) : null,
    section("verifier", trial.verifier.length ? trial.verifier.map((f) => h("div", {}, h("h3", {}, f.path), pre(f.text), f.truncated ? h("p", { class: "muted" }, `cut; ${f.size} bytes in all`) : null)) : h("p", { class: "muted" }, "no verifier output")),
    section("logs (agent/, verifier/, artifacts/)", logList(trial)),
    r && Object.keys(r.agent_metadata || {}).length ? h("details", { class: "card", "data-key": "meta" }, h("summary", {}, "agent metadata"), pre(JSON.stringify(r.agent_metadata, null, 2))) : null,
    trial.config ? h("details", { class: "card", "data-key": "config" }, h("summary", {}, "trial config"), pre(JSON.stringify(trial.config, null, 2))) : null);
  return { node, title: `${trial.name} · evsys`, live: !r || !r.finished_at };
}
