// Inline SVG charts: reward histogram, pass@k curves, time per phase. Labels are SVG text nodes.
import { s, h, fmt } from "./dom.js";

const COLORS = ["#2563eb", "#db2777", "#16a34a", "#ea580c", "#7c3aed", "#0891b2", "#ca8a04"];

export function color(i) {
  return COLORS[i % COLORS.length];
}

// Bars of how many trials fall into each reward bin (10 bins over [min(0, lo), max(1, hi)]).
export function rewardHistogram(rewards) {
  const W = 360, H = 170, L = 12, B = 28, T = 16;
  const lo = Math.min(0, ...rewards), hi = Math.max(1, ...rewards);
  const bins = new Array(10).fill(0);
  for (const r of rewards) bins[Math.min(9, Math.floor(((r - lo) / (hi - lo || 1)) * 10))] += 1;
  const top = Math.max(1, ...bins);
  const bw = (W - L - 8) / bins.length;
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": "reward histogram" });
  svg.append(s("line", { x1: L, y1: H - B, x2: W - 4, y2: H - B, class: "axis" }));
  bins.forEach((n, i) => {
    const bh = ((H - B - T) * n) / top;
    const x = L + i * bw;
    svg.append(s("rect", { x: x + 1, y: H - B - bh, width: bw - 2, height: bh, class: "bar" },
      s("title", {}, `${fmt(lo + (i * (hi - lo)) / 10, 2)}–${fmt(lo + ((i + 1) * (hi - lo)) / 10, 2)}: ${n}`)));
    if (n) svg.append(s("text", { x: x + bw / 2, y: H - B - bh - 3, class: "lbl", "text-anchor": "middle" }, n));
  });
  for (const v of [lo, (lo + hi) / 2, hi]) {
    const x = L + ((v - lo) / (hi - lo || 1)) * (W - L - 8);
    svg.append(s("text", { x, y: H - B + 16, class: "lbl", "text-anchor": "middle" }, fmt(v, 1)));
  }
  return figure("reward histogram", svg, `${rewards.length} trials`);
}

// One line per group: pass@k for k = 1..K (only groups whose rewards are all 0/1 have it).
export function passAtK(groups) {
  const series = groups.filter((g) => g.pass_at_k && Object.keys(g.pass_at_k).length);
  if (!series.length) return figure("pass@k", h("p", { class: "muted" }, "pass@k needs 0/1 rewards"));
  const W = 360, H = 170, L = 34, B = 28, T = 10;
  const maxK = Math.max(...series.flatMap((g) => Object.keys(g.pass_at_k).map(Number)));
  const x = (k) => (maxK === 1 ? (L + W) / 2 : L + ((k - 1) / (maxK - 1)) * (W - L - 14));
  const y = (v) => H - B - v * (H - B - T);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": "pass@k" });
  svg.append(s("line", { x1: L, y1: H - B, x2: W - 4, y2: H - B, class: "axis" }));
  svg.append(s("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }));
  for (const v of [0, 0.5, 1]) svg.append(s("text", { x: 4, y: y(v) + 4, class: "lbl" }, fmt(v, 1)));
  for (let k = 1; k <= maxK; k++) svg.append(s("text", { x: x(k), y: H - B + 16, class: "lbl", "text-anchor": "middle" }, `@${k}`));
  const legend = h("div", { class: "legend" });
  series.forEach((g, i) => {
    const points = Object.entries(g.pass_at_k).map(([k, v]) => [x(Number(k)), y(v)]);
    svg.append(s("polyline", { points: points.map((p) => p.join(",")).join(" "), fill: "none", stroke: color(i), "stroke-width": 2 }));
    for (const [px, py] of points) svg.append(s("circle", { cx: px, cy: py, r: 3, fill: color(i) }));
    legend.append(h("span", {}, h("i", { class: "swatch", style: { background: color(i) } }), groupLabel(g)));
  });
  return figure("pass@k", svg, legend);
}

// Mean seconds per phase, one bar per group and phase.
export function phaseBars(groups) {
  const phases = ["sandbox_start", "agent_early", "agent_setup", "agent_run", "verifier", "logs_download", "sandbox_stop"];
  const rows = [];
  for (const phase of phases) {
    groups.forEach((g, i) => {
      const t = (g.timing || {})[phase];
      if (t) rows.push({ phase, i, g, t });
    });
  }
  if (!rows.length) return figure("time per phase", h("p", { class: "muted" }, "no timing yet"));
  const W = 360, RH = 16, L = 104;
  const H = rows.length * RH + 8;
  const top = Math.max(...rows.map((r) => r.t.mean), 1e-9);
  const svg = s("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "aria-label": "time per phase" });
  rows.forEach((r, n) => {
    const yy = 4 + n * RH;
    const bw = Math.max(1, ((W - L - 60) * r.t.mean) / top);
    svg.append(s("text", { x: L - 4, y: yy + 11, class: "lbl", "text-anchor": "end" }, groups.length > 1 ? `${r.phase} ·${r.i + 1}` : r.phase));
    svg.append(s("rect", { x: L, y: yy + 2, width: bw, height: RH - 5, fill: color(r.i) },
      s("title", {}, `${groupLabel(r.g)} ${r.phase}: mean ${fmt(r.t.mean, 3)} s, p50 ${fmt(r.t.p50, 3)} s, max ${fmt(r.t.max, 3)} s (${r.t.n})`)));
    svg.append(s("text", { x: L + bw + 4, y: yy + 11, class: "lbl" }, `${fmt(r.t.mean, 2)} s`));
  });
  const legend = groups.length > 1
    ? h("div", { class: "legend" }, groups.map((g, i) => h("span", {}, h("i", { class: "swatch", style: { background: color(i) } }), `${i + 1}: ${groupLabel(g)}`)))
    : h("div", { class: "muted" }, "mean seconds over trials");
  return figure("time per phase", svg, legend);
}

export function groupLabel(g) {
  return g.model ? `${g.agent} · ${g.model}` : g.agent;
}

function figure(title, body, caption) {
  return h("figure", { class: "fig" }, h("figcaption", {}, title), body, caption ? h("div", { class: "cap" }, caption) : null);
}
