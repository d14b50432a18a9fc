"use strict";
// The lab's page: rigs, latest sessions, one session (daq/lab/page.py). No key ever goes in a URL: the
// sign-in form posts it once and the server keeps it in an HttpOnly cookie.

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const PREFIXES = [[1e9, "G"], [1e6, "M"], [1e3, "k"], [1, ""], [1e-3, "m"], [1e-6, "µ"], [1e-9, "n"]];
const PLAIN = new Set(["", "1", "-", "rad", "%", "dB"]);

function prefixFor(magnitude, unit) {
  if (PLAIN.has(unit) || unit === "s" && magnitude >= 1 || !magnitude) return [1, ""];
  return PREFIXES.find(([f]) => magnitude >= f) || PREFIXES[PREFIXES.length - 1];
}

// A value with its unit and an SI prefix: 0.064 m -> "64 mm", 1099.97 N/m -> "1.1 kN/m".
function si(value, unit = "", digits = 4) {
  if (value === null || value === undefined || !isFinite(value)) return "-";
  const [f, p] = prefixFor(Math.abs(value), unit);
  return `${Number((value / f).toPrecision(digits))} ${p}${unit}`.trim();
}

function iso(t) {
  return t ? new Date(t * 1000).toISOString().slice(0, 19).replace("T", " ") : "-";
}

async function api(method, path, body) {
  const opts = {method, headers: {}};
  if (body !== undefined) { opts.body = JSON.stringify(body); opts.headers["Content-Type"] = "application/json"; }
  const resp = await fetch(path, opts);
  const data = await resp.json().catch(() => ({error: `HTTP ${resp.status}`}));
  if (!resp.ok) throw Object.assign(new Error(`${path.split("?")[0]}: ${data.error || `HTTP ${resp.status}`}`), {status: resp.status});
  return data;
}

function problem(e) { $("problem").textContent = e ? (e.message || String(e)) : ""; }

async function whoAmI() {
  const me = await api("GET", "/lab/api/me");
  $("me").textContent = me.name ? `${me.name} (${me.role})` : "not signed in";
  $("sign-in").hidden = !!me.name;
  $("sign-out").hidden = !me.name;
  return me.name;
}

$("sign-in").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  try {
    await api("POST", "/lab/api/login", {key: $("key").value});
    $("key").value = "";
    problem(null);
    await start();
  } catch (e) { problem(e); }
});
$("sign-out").addEventListener("click", async () => { await api("DELETE", "/lab/api/login"); location.reload(); });

function rigState(r) {
  if (r.state === "offline") return `offline${r.age != null ? ` (${Math.round(r.age)} s)` : ""}`;
  return r.state;
}

function runWords(r) {
  const run = r.run;
  if (!run) return '<span class="muted">-</span>';
  const p = run.progress || {};
  const steps = p.total ? `, ${p.done || 0} of ${p.total} steps` : "";
  const session = run.session ? `<a href="/lab/sessions/${esc(run.session)}">${esc(run.session)}</a>` : "starting";
  return `${session} (${esc(run.config)}, by ${esc(run.by)}${steps})`;
}

// each list shows the answer to the last time it was asked: an older answer that arrives later is dropped
const asked = {rigs: 0, sessions: 0};

async function loadRigs() {
  const mine = ++asked.rigs;
  const rows = await api("GET", "/lab/api/rigs");
  if (mine !== asked.rigs) return;
  $("rigs").tBodies[0].innerHTML = rows.map((r) => {
    const lock = r.lock && r.lock.locked
      ? `<span class="locked">locked by ${esc(r.lock.by)} since ${esc(iso(r.lock.at))}${r.lock.note ? `: ${esc(r.lock.note)}` : ""}</span>` : "-";
    const page = r.page ? `<a href="${esc(r.page)}" rel="noreferrer">${esc(r.page)}</a>` : "-";
    return `<tr data-rig="${esc(r.name)}"><td>${esc(r.name)}</td><td class="state-${esc(r.state)}">${esc(rigState(r))}</td>` +
      `<td>${runWords(r)}</td><td>${esc(r.queue ?? 0)}</td><td>${lock}</td><td>${esc(iso(r.heartbeat))}</td><td>${page}</td></tr>`;
  }).join("") || '<tr><td colspan="7" class="muted">no rigs yet (hil serve --lab URL --rig NAME)</td></tr>';
}

async function loadSessions() {
  const mine = ++asked.sessions;
  const q = $("search").value.trim();
  const rows = await api("GET", "/lab/api/sessions" + (q ? `?q=${encodeURIComponent(q)}` : ""));
  if (mine !== asked.sessions) return;  // a newer search was asked for meanwhile
  $("sessions").tBodies[0].innerHTML = rows.map((s) =>
    `<tr><td><a href="/lab/sessions/${esc(s.id)}">${esc(s.id)}</a></td><td>${esc(s.rig)}</td><td>${esc(s.kind)}</td>` +
    `<td>${esc(s.status)}</td><td>${esc(s.by)}</td><td>${esc(iso(s.started))}</td><td>${esc(s.verdict ?? "")}</td></tr>`).join("") ||
    '<tr><td colspan="7" class="muted">no sessions</td></tr>';
}

$("search-form").addEventListener("submit", (ev) => { ev.preventDefault(); loadSessions().catch(problem); });

// ----------------------------------------------------------------------------------------- a session

function niceStep(span) {
  const raw = span / 4 || 1, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  return [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
}

// One channel as an SVG line with its axis ticks in the channel's unit (one SI prefix for the axis).
function plot(t, y, name, unit) {
  const W = 820, H = 200, L = 80, B = 24, T = 8, R = 10;
  const good = y.map((v, i) => [t[i], v]).filter(([a, b]) => isFinite(a) && isFinite(b));
  if (!good.length) return `<p class="muted">${esc(name)}: no samples</p>`;
  const t0 = good[0][0], xs = good.map(([a]) => a - t0), ys = good.map(([, b]) => b);
  let lo = Math.min(...ys), hi = Math.max(...ys);
  if (hi === lo) { const d = Math.abs(hi) * 0.1 || 1; lo -= d; hi += d; }
  const step = niceStep(hi - lo), x1 = Math.max(...xs) || 1;
  const [f, p] = prefixFor(Math.max(Math.abs(lo), Math.abs(hi)), unit);
  const decimals = Math.max(0, -Math.floor(Math.log10(step / f) + 1e-9));
  const px = (x) => L + (W - L - R) * x / x1, py = (v) => T + (H - T - B) * (hi - v) / (hi - lo);
  let ticks = "";
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) {
    ticks += `<line x1="${L - 4}" x2="${W - R}" y1="${py(v)}" y2="${py(v)}" stroke="#eee"/>` +
      `<text x="${L - 6}" y="${py(v) + 4}" text-anchor="end" font-size="11">${(v / f).toFixed(decimals)} ${esc(p + unit)}</text>`;
  }
  const tStep = niceStep(x1);
  for (let x = 0; x <= x1 + tStep * 1e-9; x += tStep) {
    ticks += `<text x="${px(x)}" y="${H - 6}" text-anchor="middle" font-size="11">${Number(x.toPrecision(4))} s</text>`;
  }
  const line = xs.map((x, i) => `${px(x).toFixed(1)},${py(ys[i]).toFixed(1)}`).join(" ");
  return `<div class="plot" data-channel="${esc(name)}" data-unit="${esc(unit)}"><div>${esc(name)} [${esc(unit)}]</div>` +
    `<svg width="${W}" height="${H}" role="img" aria-label="${esc(name)} in ${esc(unit)}">${ticks}` +
    `<polyline fill="none" stroke="#1565c0" stroke-width="1" points="${line}"/></svg></div>`;
}

function analysisHtml(a) {
  if (!a) return '<p class="muted">not analysed</p>';
  const est = a.estimates || {}, iv = a.intervals || {}, units = a.units || {};
  const rows = Object.keys(est).map((k) => {
    const i = iv[k];
    const interval = Array.isArray(i) && i.length === 2 ? `${si(i[0], units[k] || "")} .. ${si(i[1], units[k] || "")}` : "";
    return `<tr><td>${esc(k)}</td><td>${esc(si(est[k], units[k] || ""))}</td><td>${esc(interval)}</td></tr>`;
  }).join("");
  return `<p>verdict: <b>${esc(a.verdict ?? "-")}</b>${a.by ? `, by ${esc(typeof a.by === "object" ? a.by.name : a.by)}` : ""}</p>` +
    (rows ? `<table><thead><tr><th>parameter</th><th>estimate</th><th>interval</th></tr></thead><tbody>${rows}</tbody></table>` : "");
}

async function showSession(sid) {
  $("sid").textContent = sid;
  const m = await api("GET", `/lab/api/sessions/${encodeURIComponent(sid)}`);
  const rig = m.rig || {};
  const fields = [["rig", `${rig.name ?? "-"} (${m.kind ?? rig.kind ?? "?"})`], ["status", m.status + (m.reason ? `: ${m.reason}` : "")],
    ["by", m.by], ["started (UTC)", iso(m.started)], ["ended (UTC)", iso(m.ended)], ["safe", m.safe],
    ["software", m.software_version]];
  $("meta").tBodies[0].innerHTML = fields.map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(v ?? "-")}</td></tr>`).join("");
  $("analysis").innerHTML = analysisHtml(m.analysis);
  const out = [];
  const frames = Object.keys(m.streams || {}).filter((n) => m.streams[n].type === "frame").sort();
  for (const name of frames) {
    const s = await api("GET", `/lab/api/sessions/${encodeURIComponent(sid)}/streams/${encodeURIComponent(name)}`);
    const plots = s.channels.slice(0, 8).map((c, k) => plot(s.t, s.data.map((row) => row[k]), `${name} ${c}`, s.units[k] || ""));
    out.push(`<section data-stream="${esc(name)}"><h4>${esc(name)} <a href="/lab/api/sessions/${esc(sid)}/streams/${esc(name)}/csv">CSV</a>` +
      `${s.step > 1 ? ` <span class="muted">(every ${s.step}th sample shown)</span>` : ""}</h4>${plots.join("")}</section>`);
    $("streams").innerHTML = out.join("");
  }
  if (!frames.length) $("streams").innerHTML = '<p class="muted">no recorded streams</p>';
}

let timer = null;
async function start() {
  try {
    if (!(await whoAmI())) { $("home").hidden = $("session").hidden = true; return; }
    const found = location.pathname.match(/^\/lab\/sessions\/([0-9a-f]{12})$/);
    if (found) {
      $("session").hidden = false;
      await showSession(found[1]);
    } else {
      $("home").hidden = false;
      await Promise.all([loadRigs(), loadSessions()]);
      if (!timer) timer = setInterval(() => loadRigs().catch(problem), 5000);
    }
  } catch (e) { problem(e); }
}
start();
