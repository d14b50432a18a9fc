// hil serve dashboard: plain JS, no build step, no network beyond this server (labs are offline).
// Live data arrives on the WebSocket /ws/live (docs/api.md); plots are uPlot (static/uPlot.iife.min.js,
// MIT, see uPlot.LICENSE). Each stream keeps at most CAP points in fixed typed arrays, so the page's memory
// stays flat however long the run; a plot is redrawn every REDRAW_MS when new points arrived (at most 20/s),
// so a stream that delivers 10-20 blocks a second shows at least 10 updates a second.
"use strict";

const CAP = 4000;          // points per stream shown (the newest)
const REDRAW_MS = 50;      // redraws per second: at most 20
const MAX_EVENTS = 100;    // lines in the event log
const COLORS = ["#1e88e5", "#e53935", "#43a047", "#fb8c00", "#8e24aa", "#00897b", "#6d4c41", "#3949ab"];

const S = {                // window.hilStats: what the page did (the browser test reads it)
  token: null, lastSeq: 0, missed: 0, messages: 0, points: 0, redraws: 0, dropped: 0,
  estimates: 0, corrections: 0, connected: false, run: null, replay: null, status: null,
};
window.hilStats = S;
const streams = new Map(); // stream name -> Stream
const estimates = new Map(); // online stream -> {last body, history of centres}
const $ = (id) => document.getElementById(id);

// ------------------------------------------------------------------------------------------ helpers
function esc(x) {
  return String(x).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}
function num(x, digits = 5) {
  return typeof x === "number" && isFinite(x) ? Number(x.toPrecision(digits)).toString() : (x == null ? "" : String(x));
}
function fmtTime(t) { return t ? new Date(t * 1000).toLocaleString() : "-"; }
function say(text) { $("message").textContent = text || ""; }

function initToken() {
  const url = new URL(location.href);
  const t = url.searchParams.get("token");
  if (t) {
    localStorage.setItem("hil-token", t);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  S.token = localStorage.getItem("hil-token");
  $("token-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    S.token = $("token-input").value.trim();
    localStorage.setItem("hil-token", S.token);
    $("token-form").hidden = true;
    say("");
    refreshAll();
    reconnect();
  });
}

async function api(method, path, body) {
  const headers = {};
  if (S.token) headers.Authorization = "Bearer " + S.token;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {method, headers, body: body === undefined ? undefined : JSON.stringify(body)});
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  if (r.status === 401) $("token-form").hidden = false;
  if (!r.ok) throw new Error((data && data.error) || `${r.status} ${r.statusText}`);
  return data;
}
function withToken(path) {
  return S.token ? path + (path.includes("?") ? "&" : "?") + "token=" + encodeURIComponent(S.token) : path;
}

// ------------------------------------------------------------------------------------------ streams
class Stream {
  constructor(name, channels, units) {
    this.name = name;
    this.channels = channels;
    this.units = units;
    this.cols = [new Float64Array(2 * CAP), ...channels.map(() => new Float64Array(2 * CAP))];
    this.end = 0;
    this.dirty = false;
    const box = document.createElement("div");
    box.className = "plot";
    box.dataset.stream = name;
    $("plots").appendChild(box);
    this.box = box;
    const unitList = [...new Set(units)];
    const scales = {x: {time: true}};
    unitList.forEach((u) => { scales[u] = {auto: true}; });
    const axes = [{}];
    unitList.slice(0, 2).forEach((u, k) => axes.push({scale: u, label: u, side: k === 0 ? 3 : 1, size: 70}));
    this.plot = new uPlot({
      title: name, width: Math.max(300, $("plots").clientWidth - 10), height: 200, scales, axes,
      series: [{label: "time"}, ...channels.map((c, i) => ({
        label: `${c} [${units[i]}]`, scale: units[i], stroke: COLORS[i % COLORS.length], width: 1,
      }))],
    }, this.view(), box);
  }
  push(t, data) {
    const n = t.length;
    for (let k = 0; k < n; k++) {
      if (this.end === 2 * CAP) {  // keep the newest CAP points at the front: memory never grows
        for (const c of this.cols) c.copyWithin(0, CAP, 2 * CAP);
        this.end = CAP;
      }
      this.cols[0][this.end] = t[k];
      for (let i = 0; i < this.channels.length; i++) {
        const v = data[i] ? data[i][k] : null;
        this.cols[i + 1][this.end] = v == null ? NaN : v;
      }
      this.end++;
    }
    S.points += n;
    this.dirty = true;
  }
  view() {
    const a = Math.max(0, this.end - CAP);
    return this.cols.map((c) => c.subarray(a, this.end));
  }
  draw() {
    if (!this.dirty) return;
    this.dirty = false;
    this.plot.setData(this.view());
    S.redraws++;
  }
  remove() { this.plot.destroy(); this.box.remove(); }
}

function onFrame(m) {
  let s = streams.get(m.stream);
  if (!s || s.channels.join() !== m.channels.join()) {
    if (s) s.remove();
    s = new Stream(m.stream, m.channels, m.units);
    streams.set(m.stream, s);
  }
  s.push(m.t, m.data);
}
setInterval(() => {
  for (const s of streams.values()) s.draw();
  if (correction) correction.draw();
  $("points").textContent = `${S.points} points, ${S.redraws} redraws`;
  $("points").dataset.points = String(S.points);
}, REDRAW_MS);
window.addEventListener("resize", () => {
  for (const s of streams.values()) s.plot.setSize({width: Math.max(300, $("plots").clientWidth - 10), height: 200});
  if (correction) correction.plot.setSize({width: Math.max(300, $("plots").clientWidth - 10), height: 180});
});

// ------------------------------------------------------------------------------------------ setpoint correction
// The press's setpoint correction (docs/contracts.md, events on <rig>.plan): every `setpoint_reached` /
// `setpoint_not_reached` carries the residual q_actual - q_desired after the correction; plotted per step
// with the tolerance band of the run's config ([correction].tolerance) once the session's config is known.
// The unit is the one the rig's force stream carries for `force` (N by the contract until a frame came).
let correction = null;
class CorrectionPlot {
  constructor(stream) {
    this.stream = stream;
    this.k = 0;
    this.cols = [new Float64Array(CAP), new Float64Array(CAP), new Float64Array(CAP), new Float64Array(CAP)];
    this.n = 0;
    this.tolerance = null;
    this.dirty = false;
    const force = streams.get(stream.split(".")[0] + ".force");
    const i = force ? force.channels.indexOf("force") : -1;
    this.unit = i >= 0 ? force.units[i] : "N";
    const box = $("correction");
    box.hidden = false;
    box.innerHTML = "";
    this.plot = new uPlot({
      title: `setpoint correction: error q_actual − q_desired per step (${stream})`,
      width: Math.max(300, $("plots").clientWidth - 10), height: 180,
      scales: {x: {time: false}, err: {auto: true}},
      axes: [{label: "step"}, {scale: "err", label: this.unit, size: 70}],
      series: [{label: "step"},
        {label: `error [${this.unit}]`, scale: "err", stroke: COLORS[1], width: 1, points: {show: true, size: 5}},
        {label: `+tolerance [${this.unit}]`, scale: "err", stroke: "#999", width: 1, dash: [4, 4], points: {show: false}},
        {label: `−tolerance [${this.unit}]`, scale: "err", stroke: "#999", width: 1, dash: [4, 4], points: {show: false}}],
    }, this.view(), box);
  }
  push(body) {
    if (this.n === CAP) {  // the newest CAP steps: memory never grows
      for (const c of this.cols) c.copyWithin(0, 1);
      this.n--;
    }
    const tol = this.tolerance == null ? NaN : this.tolerance;
    this.k++;
    const r = typeof body.residual === "number" ? body.residual : NaN;
    [this.k, r, tol, -tol].forEach((v, i) => { this.cols[i][this.n] = v; });
    this.n++;
    S.corrections++;
    this.dirty = true;
  }
  setTolerance(tol) {
    this.tolerance = tol;
    this.cols[2].fill(tol, 0, this.n);
    this.cols[3].fill(-tol, 0, this.n);
    this.dirty = true;
  }
  view() { return this.cols.map((c) => c.subarray(0, this.n)); }
  draw() {
    if (!this.dirty) return;
    this.dirty = false;
    this.plot.setData(this.view());
    $("correction").dataset.points = String(this.n);
  }
  remove() { this.plot.destroy(); $("correction").hidden = true; $("correction").dataset.points = "0"; }
}
function onCorrection(m) {
  if (!correction) {
    correction = new CorrectionPlot(m.stream);
    const session = m.session;
    if (session) {  // the tolerance of the run's config, once
      api("GET", "/api/sessions/" + encodeURIComponent(session)).then((d) => {
        const tol = d && d.config && d.config.correction && d.config.correction.tolerance;
        if (correction && typeof tol === "number") correction.setTolerance(tol);
      }).catch(() => {});
    }
  }
  correction.push(m.body || {});
}
function clearLive() {
  for (const s of streams.values()) s.remove();
  streams.clear();
  if (correction) { correction.remove(); correction = null; }
  estimates.clear();
  renderEstimates();
}
// ------------------------------------------------------------------------------------------ estimates
function verdictText(v) {
  if (!v) return "";
  if (v.error) return "error: " + v.error;
  let text;
  if (v.models && typeof v.models === "object") {
    text = Object.entries(v.models).map(([name, m]) => {
      m = (m && typeof m === "object") ? m : {verdict: String(m)};
      const word = m.verdict || (m.reject ? "reject" : "keep");
      const a = m.min_alpha_min;
      return `${name} ${word}` + (typeof a === "number" ? ` (${num(100 * a, 3)} %)` : "");
    }).join(" · ");
  } else if ("rejected" in v || "kept" in v) {
    text = `rejected ${(v.rejected || []).join(", ") || "none"}; kept ${(v.kept || []).join(", ") || "none"}`;
  } else {
    text = Object.entries(v).filter(([, x]) => ["string", "number", "boolean"].includes(typeof x))
      .map(([k, x]) => `${k}=${num(x)}`).join(", ");
  }
  if (v.settled_for) text += ` [same ${v.settled_for}x]`;
  return text;
}

function onEstimate(m) {
  const b = m.body || {};
  let e = estimates.get(m.stream);
  if (!e) { e = {history: []}; estimates.set(m.stream, e); }
  e.kind = m.kind;
  e.body = b;
  if (m.kind === "estimate" && Array.isArray(b.values)) {
    e.history.push(b);
    if (e.history.length > 12) e.history.shift();
  }
  S.estimates++;
  renderEstimates();
}

function renderEstimates() {
  const out = [];
  for (const [stream, e] of estimates) {
    const b = e.body;
    out.push(`<div class="est" data-stream="${esc(stream)}"><b>${esc(stream)}</b> <span class="muted">${esc(b.model || "")}` +
             ` used ${esc(b.used ?? b.series_used ?? "")}` + (b.elapsed_s != null ? `, fit ${num(1e3 * b.elapsed_s, 3)} ms` : "") + `</span>`);
    if (e.kind === "estimate_failed") {
      out.push(`<div class="error">estimate failed: ${esc(b.error || "")}</div></div>`);
      continue;
    }
    const names = b.parameters || (b.values || []).map((_, i) => "p" + i);
    const units = b.units || names.map(() => b.unit || "");
    out.push('<table class="estimates"><thead><tr><th>parameter</th><th>value</th><th>std</th>' +
             "<th>95 % interval</th><th>rel. std</th></tr></thead><tbody>");
    names.forEach((p, i) => {
      const v = (b.values || [])[i], s = (b.std || [])[i], r = (b.rel_std || [])[i];
      const lo = typeof v === "number" && typeof s === "number" ? v - 1.96 * s : null;
      const hi = typeof v === "number" && typeof s === "number" ? v + 1.96 * s : null;
      const u = units[i] && units[i] !== "1" ? ` ${esc(units[i])}` : "";
      out.push(`<tr><td>${esc(p)}</td><td class="num">${num(v, 6)}${u}</td><td class="num">${num(s, 3)}</td>` +
               `<td class="num">${lo == null ? "" : `[${num(lo, 6)}, ${num(hi, 6)}]`}</td>` +
               `<td class="num">${typeof r === "number" ? num(100 * r, 3) + " %" : ""}</td></tr>`);
    });
    out.push("</tbody></table>");
    if (b.verdict) out.push(`<div class="verdict">verdict: <b>${esc(verdictText(b.verdict))}</b></div>`);
    if (b.stop) out.push(`<div class="verdict">stop: <b>${esc(b.stop)}</b></div>`);
    if (Array.isArray(b.covariance) && names.length >= 2) out.push(`<canvas class="ellipse" width="260" height="200" data-stream="${esc(stream)}"></canvas>`);
    out.push("</div>");
  }
  $("estimates").innerHTML = out.join("") || "none yet";
  $("estimates").className = estimates.size ? "" : "muted";
  for (const c of document.querySelectorAll("canvas.ellipse")) drawEllipse(c, estimates.get(c.dataset.stream));
}

// The 95 % confidence ellipse of the first two parameters (chi2 with 2 dof: 5.991), with the earlier
// estimates' ellipses fainter: how the estimate closes in.
function drawEllipse(canvas, e) {
  const g = canvas.getContext("2d"), W = canvas.width, H = canvas.height;
  const shapes = e.history.filter((b) => Array.isArray(b.covariance) && b.covariance.length >= 2).map((b) => {
    const [a, c, d] = [b.covariance[0][0], b.covariance[0][1], b.covariance[1][1]];
    const tr = a + d, det = a * d - c * c, disc = Math.sqrt(Math.max(0, tr * tr / 4 - det));
    const l1 = tr / 2 + disc, l2 = Math.max(0, tr / 2 - disc);
    const ang = Math.abs(c) > 0 ? Math.atan2(l1 - a, c) : (a >= d ? 0 : Math.PI / 2);
    return {x: b.values[0], y: b.values[1], r1: Math.sqrt(5.991 * l1), r2: Math.sqrt(5.991 * l2), ang};
  }).filter((s) => [s.x, s.y, s.r1, s.r2].every(isFinite));
  g.clearRect(0, 0, W, H);
  if (!shapes.length) return;
  const last = shapes[shapes.length - 1];
  // each axis scaled to its own extent (parameters of different size): x and y of the ellipse's points
  const pts = (s) => Array.from({length: 48}, (_, i) => {
    const a = 2 * Math.PI * i / 48, u = s.r1 * Math.cos(a), v = s.r2 * Math.sin(a);
    return [s.x + u * Math.cos(s.ang) - v * Math.sin(s.ang), s.y + u * Math.sin(s.ang) + v * Math.cos(s.ang)];
  });
  const all = shapes.map(pts);
  const flat = all.flat();
  const sx = Math.max(...flat.map((p) => Math.abs(p[0] - last.x)), 1e-300);
  const sy = Math.max(...flat.map((p) => Math.abs(p[1] - last.y)), 1e-300);
  all.forEach((ring, k) => {
    g.beginPath();
    g.strokeStyle = k === all.length - 1 ? "#1e88e5" : "rgba(30,136,229,0.25)";
    ring.forEach(([x, y], i) => {
      const px = W / 2 + 0.45 * W * (x - last.x) / sx, py = H / 2 - 0.4 * H * (y - last.y) / sy;
      if (i) g.lineTo(px, py); else g.moveTo(px, py);
    });
    g.closePath();
    g.stroke();
  });
  const names = e.body.parameters || ["p0", "p1"];
  g.fillStyle = "#555";
  g.fillText(`95 % ellipse: ${names[0]} (x) vs ${names[1]} (y)`, 4, 12);
}

// ------------------------------------------------------------------------------------------ live socket
let ws = null;
let retry = null;
function reconnect() {
  if (ws) { ws.onclose = null; ws.close(); }
  const url = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + withToken("/ws/live");
  ws = new WebSocket(url);
  ws.onopen = () => { S.connected = true; $("conn").textContent = "live"; $("conn").className = "pill on"; };
  ws.onclose = () => {
    S.connected = false;
    $("conn").textContent = "offline";
    $("conn").className = "pill off";
    clearTimeout(retry);
    retry = setTimeout(reconnect, 1000);
  };
  ws.onmessage = (ev) => onMessage(JSON.parse(ev.data));
}

function onMessage(m) {
  S.messages++;
  if (S.lastSeq && m.seq > S.lastSeq + 1) S.missed += m.seq - S.lastSeq - 1;
  S.lastSeq = m.seq;
  switch (m.type) {
    case "hello":
      S.run = m.run;
      if (m.replay) onReplay({state: "started", replay: m.replay});
      if (m.status) onStatus(m.status);
      for (const e of m.estimates || []) onEstimate(e);
      refreshRuns();
      break;
    case "frame": onFrame(m); break;
    case "event":
      if (m.kind === "estimate" || m.kind === "estimate_failed") onEstimate(m);
      if (m.kind === "plan_outcome") showOutcome(m.body);
      if (m.kind === "setpoint_reached" || m.kind === "setpoint_not_reached") onCorrection(m);
      logEvent(m);
      break;
    case "status": onStatus(m); break;
    case "replay": onReplay(m); break;
    case "run":
      if (m.state === "started") { newRun(m.run); setTimeout(refreshSessions, 1000); }
      refreshRuns();
      if (m.state === "ended") refreshSessions();
      break;
    case "queue": refreshRuns(); break;
    case "stats": S.dropped = m.dropped; break;
  }
  $("counters").textContent = `seq ${S.lastSeq} · missed ${S.missed} · dropped by the server ${S.dropped}`;
}

function newRun(run) {
  clearLive();
  $("replay-box").hidden = true;
  $("events").innerHTML = "";
  $("outcome").hidden = true;
  S.run = run;
}

// A replayed session (POST /api/replays): the same plots, marked as a replay; a looping replay's next pass
// starts the plots over (its times begin again).
function onReplay(m) {
  const r = m.replay;
  if (m.state === "started") {
    newRun(null);
    S.replay = r;
  } else if (m.state === "pass") {
    clearLive();
  }
  const box = $("replay-box");
  box.hidden = false;
  box.dataset.replay = r.id;
  $("replay-session").textContent = r.session;
  $("replay-info").textContent = `${r.kind}, ${num(r.speed, 3)}× the recorded pace${r.loop ? ", looping" : ""}, ` +
    `pass ${Math.max(1, r.passes)}, started by ${r.by}`;
  $("replay-state").textContent = m.state === "ended" ? r.status + (r.reason ? ": " + r.reason : "") : "replaying";
  $("replay-state").className = "pill " + (m.state === "ended" ? "" : "running");
  $("btn-replay-stop").hidden = m.state === "ended";
  if (m.state === "ended") S.replay = null;
}
function onStatus(st) {
  S.status = st;
  if (st.state === "replaying" || (S.replay && st.session === S.replay.session)) {
    const p = st.progress || {};
    $("replay-progress").textContent = `${p.done || 0} of ${p.total || 0} messages`;
    return;
  }
  const p = st.progress || {};
  $("run-state").textContent = st.state || "";
  $("run-state").className = "pill " + (st.state || "");
  $("run-session").textContent = st.session || "-";
  const total = p.total || 0;
  $("run-progress").max = total || 1;
  $("run-progress").value = total ? Math.min(p.done || 0, total) : 0;
  $("run-progress-text").textContent = (total ? `${p.done} of ${total} steps` : `${p.done || 0} steps`) +
    (p.label ? ` (last: ${p.label})` : "");
}

function showOutcome(b) {
  const box = $("outcome");
  box.hidden = false;
  box.className = "outcome " + (b.safe ? "safe" : "unsafe");
  box.textContent = `${b.status}${b.reason ? ": " + b.reason : ""} · safe state ${b.safe ? "confirmed" : "NOT CONFIRMED: " + (b.safe_errors || []).join("; ")}`;
}

function logEvent(m) {
  const li = document.createElement("li");
  const body = m.kind === "estimate" ? "" : JSON.stringify(m.body);
  li.textContent = `${new Date(m.t * 1000).toLocaleTimeString()} ${m.stream} ${m.kind} ${body.length > 200 ? body.slice(0, 200) + "…" : body}`;
  const list = $("events");
  list.insertBefore(li, list.firstChild);
  while (list.children.length > MAX_EVENTS) list.removeChild(list.lastChild);
}

// ------------------------------------------------------------------------------------------ tables
async function refreshConfigs() {
  try {
    const configs = await api("GET", "/api/configs");
    $("configs").tBodies[0].innerHTML = configs.map((c) => `<tr><td>${esc(c.name)}</td><td>${esc(c.kind || "")}` +
      `${c.simulated ? ' <span class="muted">sim</span>' : ""}</td><td class="${c.ok ? "ok" : "error"}">` +
      `${c.ok ? "ok" : esc(c.error)}</td><td>${c.ok ? `<button data-run="${esc(c.name)}">run</button>` : ""}</td></tr>`).join("");
  } catch (e) { say("configs: " + e.message); }
}

async function refreshRuns() {
  let snap;
  try { snap = await api("GET", "/api/runs"); } catch (e) { say("runs: " + e.message); return; }
  const cur = snap.current;
  $("run-none").hidden = !!cur;
  $("run-box").hidden = !cur;
  if (cur) {
    $("run-config").textContent = cur.config;
    $("run-kind").textContent = cur.kind || "";
    $("run-by").textContent = cur.by;
    $("run-box").dataset.run = cur.id;
    if (cur.session) $("run-session").textContent = cur.session;
    if (cur.live) onStatus(cur.live);
  }
  $("queue").tBodies[0].innerHTML = snap.queued.map((e) => `<tr><td><code>${esc(e.id)}</code></td><td>${esc(e.config)}</td>` +
    `<td>${esc(e.by)}</td><td><button data-delete="${esc(e.id)}">delete</button></td></tr>`).join("") ||
    '<tr><td colspan="4" class="muted">empty</td></tr>';
  $("finished").tBodies[0].innerHTML = snap.finished.map((e) => `<tr title="${esc(e.reason || "")}"><td>${esc(e.config)}</td>` +
    `<td>${esc(e.status)}</td><td class="${e.safe ? "ok" : "error"}">${e.safe == null ? "" : e.safe ? "safe" : "NOT SAFE"}</td>` +
    `<td>${esc(e.by)}</td></tr>`).join("");
}

async function refreshSessions() {
  try {
    const sessions = await api("GET", "/api/sessions");
    sessions.sort((a, b) => b.started - a.started);
    $("sessions").tBodies[0].innerHTML = sessions.slice(0, 200).map((s) => `<tr><td><a href="#" data-session="${esc(s.id)}">` +
      `${esc(s.id)}</a></td><td>${esc(s.kind)}</td><td title="${esc(s.reason || "")}">${esc(s.status)}</td>` +
      `<td>${fmtTime(s.started)}</td><td>${esc(s.started_by || "")}</td><td>` + ["hdf5", "mat", "csv"].map((f) =>
        `<a href="${esc(withToken(`/api/sessions/${s.id}/export?format=${f}`))}">${f}</a>`).join(" ") +
      `</td><td><button data-replay="${esc(s.id)}" title="play it on the live view">replay</button></td></tr>`).join("");
  } catch (e) { say("sessions: " + e.message); }
}

async function showSession(id) {
  try {
    const d = await api("GET", "/api/sessions/" + encodeURIComponent(id));
    const lines = [`session ${d.id} (${d.kind}, ${d.status}${d.reason ? ": " + d.reason : ""})`,
      `started ${fmtTime(d.started)} by ${d.started_by || "-"}; ended ${fmtTime(d.ended)}; software ${d.software_version}`];
    for (const [name, s] of Object.entries(d.streams)) {
      lines.push(s.type === "frame" ? `  ${name}: ${s.n_samples} samples, ` +
        s.channels.map((c, i) => `${c} [${s.units[i]}]`).join(", ") : `  ${name}: events`);
    }
    for (const c of d.event_counts) lines.push(`  ${c.stream} ${c.kind}: ${c.n}`);
    $("session-detail").textContent = lines.join("\n");
    $("session-detail").hidden = false;
    $("analysis").dataset.session = d.id;
    showAnalysis(d.id);
  } catch (e) { say("session: " + e.message); }
}

// The analysis `hil analyze --plots` makes of a session (run by the server in a process of its own).
async function showAnalysis(id) {
  const box = $("analysis");
  box.hidden = false;
  let a;
  try { a = await api("GET", `/api/sessions/${encodeURIComponent(id)}/analysis`); } catch (e) { box.textContent = e.message; return; }
  if (box.dataset.session !== a.session) return;
  if (a.state === "running") {
    box.innerHTML = '<span class="muted">analysing ...</span>';
    setTimeout(() => showAnalysis(id), 1000);
  } else if (a.state === "done") {
    box.innerHTML = `<button data-analyze="${esc(a.session)}">analyse again</button>` +
      a.plots.map((f) => `<div><img alt="${esc(f)}" src="${esc(withToken(`/api/sessions/${a.session}/analysis/${f}`))}"></div>`).join("") +
      `<details><summary>report (hil analyze --json)</summary><pre>${esc(JSON.stringify(a.report, null, 1))}</pre></details>`;
  } else {
    box.innerHTML = `<button data-analyze="${esc(a.session)}">analyse</button>` +
      (a.state === "failed" ? ` <span class="error">${esc(a.error)}</span>` : "");
  }
}

document.addEventListener("click", async (ev) => {
  const t = ev.target;
  try {
    if (t.dataset.run) { await api("POST", "/api/runs", {config: t.dataset.run}); say(""); refreshRuns(); }
    else if (t.dataset.delete) { await api("DELETE", "/api/runs/" + t.dataset.delete); refreshRuns(); }
    else if (t.dataset.action) {
      const st = await api("POST", `/api/runs/${$("run-box").dataset.run}/${t.dataset.action}`);
      onStatus(st);
    } else if (t.dataset.session) { ev.preventDefault(); showSession(t.dataset.session); }
    else if (t.dataset.replay) {
      await api("POST", "/api/replays", {session: t.dataset.replay, speed: Number($("replay-speed").value),
                                         loop: $("replay-loop").checked});
      say("");
    } else if (t.id === "btn-replay-stop") { await api("POST", `/api/replays/${$("replay-box").dataset.replay}/stop`); }
    else if (t.dataset.analyze) { await api("POST", `/api/sessions/${t.dataset.analyze}/analysis`); showAnalysis(t.dataset.analyze); }
  } catch (e) { say(e.message); }
});

function refreshAll() { refreshConfigs(); refreshRuns(); refreshSessions(); }
initToken();
refreshAll();
reconnect();
setInterval(refreshRuns, 3000);
setInterval(refreshSessions, 15000);
