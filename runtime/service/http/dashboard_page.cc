#include "runtime/service/http/dashboard_page.h"

namespace gpupool::runtime {
namespace {

// Element ids are the test's handles (tests/python/test_dashboard.py): keep them stable.
constexpr char kPage[] = R"html(<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>gpupool</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}h2{font-size:1.05em;margin-top:1.5em}
table{border-collapse:collapse}td,th{padding:2px 10px;border-bottom:1px solid #ddd;text-align:left}
.gpu{display:inline-block;width:1.6em;height:1.6em;margin:1px;border-radius:3px;font-size:10px;text-align:center;line-height:1.6em;color:#fff}
.healthy{background:#2a7}.degraded{background:#d90}.draining{background:#c60}.quarantined{background:#a3a}.failed{background:#611}.lost{background:#b22}
#error{color:#b22}.muted{color:#777}
</style></head><body>
<h1>gpupool <span id="viewer" class="muted"></span></h1>
<form id="login"><label>Token <input id="token" type="password" autocomplete="off" size="40"></label>
<button id="save" type="submit">Show</button> <button id="forget" type="button">Forget</button></form>
<p id="error"></p>
<div id="board" hidden>
<p id="summary"></p>
<h2>GPUs allocated, last 24 hours <span class="muted">(pool: black; capacity: grey; teams: colours)</span></h2>
<svg id="history" width="720" height="160" viewBox="0 0 720 160" style="border:1px solid #ddd"></svg>
<div id="history-legend" class="muted"></div>
<h2>Utilisation by GPU model, last 24 hours <span class="muted">(allocated / schedulable GPUs of the model)</span></h2>
<svg id="model-history" width="720" height="120" viewBox="0 0 720 120" style="border:1px solid #ddd"></svg>
<div id="model-legend" class="muted"></div>
<h2>Nodes and GPUs</h2><div id="health"></div>
<h2>Queue</h2><table id="queue"><thead><tr><th>state</th><th>id</th><th>team</th><th>class</th><th>reason</th></tr></thead><tbody></tbody></table>
<h2>Usage and cost, last <select id="period"><option value="86400">24 hours</option><option value="604800">7 days</option><option value="2592000">30 days</option></select></h2>
<table id="usage"><thead><tr><th>team</th><th>GPU-hours</th><th>leases</th><th>cost (USD)</th><th>busy / leased</th></tr></thead><tbody></tbody></table>
<p id="capacity" class="muted"></p>
<h2>Savings, last 7 days <span class="muted">(each team owning its peak or p95 of GPUs per model, against the pooled fleet)</span></h2>
<table id="savings"><thead><tr><th>team</th><th>model</th><th>GPU-hours</th><th>peak GPUs</th><th>p95 GPUs</th><th>dedicated at peak (USD)</th><th>dedicated at p95 (USD)</th></tr></thead><tbody></tbody></table>
<p id="savings-summary"></p>
</div>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
function text(v){return document.createTextNode(v === undefined || v === null ? "" : String(v));}
function row(cells){const tr=document.createElement("tr");for(const c of cells){const td=document.createElement("td");td.appendChild(text(c));tr.appendChild(td);}return tr;}
async function api(path){
  const r = await fetch(path, {headers: {"Authorization": "Bearer " + sessionStorage.getItem("gpupool-token")}});
  if (r.status === 401) throw new Error("the head does not know this token");
  if (!r.ok) throw new Error(path + ": " + r.status);
  return r.json();
}
const COLOURS = ["#1f77b4","#ff7f0e","#2ca02c","#d62728","#9467bd","#8c564b","#e377c2","#17becf"];
function drawHistory(rows){
  const svg = $("history"); svg.replaceChildren();
  if (!rows.length) { $("history-legend").textContent = "no history yet (the head samples every minute with --journal)"; return; }
  const t0 = Math.min(...rows.map(r => r.t_s)), t1 = Math.max(...rows.map(r => r.t_s)) || t0 + 1;
  const top = Math.max(1, ...rows.map(r => Math.max(r.allocated_gpus, r.scope === "pool" ? r.capacity_gpus : 0)));
  const series = {};
  for (const r of rows) {
    (series[r.scope] = series[r.scope] || []).push(r);
    if (r.scope === "pool") (series["(capacity)"] = series["(capacity)"] || []).push({t_s: r.t_s, allocated_gpus: r.capacity_gpus});
  }
  let i = 0;
  for (const [scope, points] of Object.entries(series)) {
    const colour = scope === "pool" ? "#000" : scope === "(capacity)" ? "#aaa" : COLOURS[i++ % COLOURS.length];
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("fill", "none"); line.setAttribute("stroke", colour); line.setAttribute("stroke-width", "1.5");
    line.setAttribute("points", points.map(p => (10 + 700 * (p.t_s - t0) / Math.max(1, t1 - t0)).toFixed(1) + "," +
        (150 - 140 * p.allocated_gpus / top).toFixed(1)).join(" "));
    line.dataset.scope = scope;
    svg.appendChild(line);
  }
  $("history-legend").textContent = "teams: " + Object.keys(series).filter(s => s !== "pool" && s !== "(capacity)").join(", ") +
      "; top of the chart: " + top.toFixed(1) + " GPUs";
}
function drawModels(rows){
  const svg = $("model-history"); svg.replaceChildren();
  const series = {};
  for (const r of rows) {
    if (!r.scope.startsWith("model:")) continue;
    (series[r.scope.slice(6)] = series[r.scope.slice(6)] || []).push(r);
  }
  if (!Object.keys(series).length) { $("model-legend").textContent = "no history yet"; return; }
  const t0 = Math.min(...rows.map(r => r.t_s)), t1 = Math.max(...rows.map(r => r.t_s));
  const pct = (r) => r.capacity_gpus > 0 ? 100 * r.allocated_gpus / r.capacity_gpus : 0;
  const legend = [];
  let i = 0;
  for (const [model, points] of Object.entries(series)) {
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("fill", "none"); line.setAttribute("stroke", COLOURS[i++ % COLOURS.length]); line.setAttribute("stroke-width", "1.5");
    line.setAttribute("points", points.map(p => (10 + 700 * (p.t_s - t0) / Math.max(1, t1 - t0)).toFixed(1) + "," +
        (110 - pct(p)).toFixed(1)).join(" "));
    const last = pct(points[points.length - 1]).toFixed(1);
    line.dataset.model = model; line.dataset.last = last;
    svg.appendChild(line);
    legend.push(model + " " + last + "% now");
  }
  $("model-legend").textContent = legend.join("; ") + " (top of the chart: 100%)";
}
function usd(cents){return (cents / 100).toFixed(2);}
function drawSavings(s){
  const t = $("savings").tBodies[0]; t.replaceChildren();
  for (const r of s.teams) t.appendChild(row([r.team, r.model, r.gpu_hours.toFixed(3), r.peak_gpus, r.p95_gpus,
      usd(r.dedicated_cost_peak_cents), usd(r.dedicated_cost_p95_cents)]));
  const fleet = (f) => f.gpus + " GPUs, " + usd(f.cost_cents) + " USD, " + (100 * f.utilisation).toFixed(1) + "% used";
  // Over a short or quiet period the pooled fleet can cost more than what the teams used would need.
  const saves = (c) => c >= 0 ? "pooling saves " + usd(c) + " USD" : "pooling costs " + usd(-c) + " USD more";
  $("savings-summary").textContent = "pooled: " + fleet(s.pooled) + "; dedicated at peak: " + fleet(s.dedicated_peak) +
      " (" + saves(s.saved_vs_peak_cents) + "); at p95: " + fleet(s.dedicated_p95) + " (" + saves(s.saved_vs_p95_cents) + ")";
  $("savings-summary").dataset.pooledCents = s.pooled.cost_cents;
  $("savings-summary").dataset.peakCents = s.dedicated_peak.cost_cents;
}
// The savings report sweeps the ledger of 7 days: fetched once a minute, not on every refresh.
let savingsAt = 0, savingsLast = null;
async function savingsReport(now){
  if (savingsLast && now - savingsAt < 60) return savingsLast;
  savingsLast = await api("/api/v1/savings?since=" + (now - 7 * 86400) + "&until=" + now).catch((e) => ({error: e.message}));
  savingsAt = now;
  return savingsLast;
}
async function refresh(){
  if (!sessionStorage.getItem("gpupool-token")) { $("board").hidden = true; return; }
  try {
    const now = Date.now() / 1000, period = Number($("period").value);
    // History and savings need the head's journal; without one their panels say so and the rest shows.
    const [status, queue, usage, history, savings] = await Promise.all([api("/api/v1/status"), api("/api/v1/queue"),
        api("/api/v1/usage?by=team&since=" + (now - period) + "&until=" + now),
        api("/api/v1/history?since=" + (now - 86400) + "&until=" + (now + 1)).catch(() => ({rows: []})),
        savingsReport(now)]);
    drawHistory(history.rows.filter(r => !r.scope.startsWith("model:")));
    drawModels(history.rows);
    if (savings.error) { $("savings").tBodies[0].replaceChildren(); $("savings-summary").textContent = savings.error; }
    else drawSavings(savings);
    $("error").textContent = "";
    $("viewer").textContent = status.viewer === "pool" ? "(whole pool)" : "(team " + status.viewer + ")";
    let gpus = 0, up = 0;
    const health = $("health"); health.replaceChildren();
    for (const n of status.nodes) {
      up += n.up ? 1 : 0;
      const line = document.createElement("div"); line.className = "node"; line.dataset.node = n.name;
      line.appendChild(text(n.name + " (" + n.agent + ") "));
      for (const g of n.gpus) {
        gpus++;
        const s = document.createElement("span"); s.className = "gpu " + g.health; s.title = g.model + " " + g.health;
        s.dataset.health = g.health; s.appendChild(text(g.index)); line.appendChild(s);
      }
      health.appendChild(line);
    }
    $("summary").textContent = status.nodes.length + " nodes (" + up + " up), " + gpus + " GPUs; pool: " +
        status.totals.leases + " leases, " + status.totals.pending + " pending";
    const q = $("queue").tBodies[0]; q.replaceChildren();
    for (const l of queue.leases) q.appendChild(row(["running", l.lease, l.team, l.priority_class, ""]));
    for (const p of queue.pending) q.appendChild(row(["pending", p.request, p.team, "", p.reason]));
    const u = $("usage").tBodies[0]; u.replaceChildren();
    // Efficiency over the leases whose job said how long they were busy ("-": none yet).
    const eff = (r) => r.efficiency === null || r.efficiency === undefined ? "-" : (100 * r.efficiency).toFixed(0) + "%";
    for (const r of usage.rows) u.appendChild(row([r.group, r.gpu_hours.toFixed(3), r.leases, (r.cost_cents / 100).toFixed(2), eff(r)]));
    if (usage.other_teams) u.appendChild(row(["(other teams)", usage.other_teams.gpu_hours.toFixed(3), usage.other_teams.leases, (usage.other_teams.cost_cents / 100).toFixed(2), eff(usage.other_teams)]));
    if (usage.idle) u.appendChild(row(["(idle)", usage.idle.gpu_hours.toFixed(3), "", (usage.idle.cost_cents / 100).toFixed(2)]));
    $("capacity").textContent = usage.capacity ? "capacity " + usage.capacity.gpu_hours.toFixed(1) + " GPU-hours, " +
        (usage.capacity.cost_cents / 100).toFixed(2) + " USD; utilisation " + (100 * usage.utilisation).toFixed(1) + "%" : "";
    $("board").hidden = false;
  } catch (e) {
    $("error").textContent = e.message;
  }
}
$("login").addEventListener("submit", (e) => { e.preventDefault(); sessionStorage.setItem("gpupool-token", $("token").value); $("token").value = ""; savingsLast = null; refresh(); });
$("forget").addEventListener("click", () => { sessionStorage.removeItem("gpupool-token"); savingsLast = null; $("board").hidden = true; });
$("period").addEventListener("change", refresh);
refresh();
setInterval(refresh, 5000);
</script></body></html>
)html";

}  // namespace

std::string_view DashboardPage() { return kPage; }

}  // namespace gpupool::runtime
