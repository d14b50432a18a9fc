// hil serve dashboard: plain JS, no build step, no network beyond this server (labs are offline).
// Live data arrives on the WebSocket /ws/live (docs/api.md); plots are uPlot (static/uPlot.iife.min.js,
// MIT, see uPlot.LICENSE) through plots.js. A plot is redrawn every REDRAW_MS when new points arrived (at
// most 20 redraws a second). A reload during a run rebuilds the run so far from the store (GET
// /api/sessions/{id}/series and /summary) and continues live. Finished runs and sessions have pages of
// their own (pages.js, #/runs/ID and #/sessions/ID), linked from "Last runs" and "Sessions".
"use strict";

const REDRAW_MS = 50;      // redraws per second: at most 20
const MAX_EVENTS = 40;     // lines in the event log (the newest; the session's page keeps them all)

const S = {                // window.hilStats: what the page did (the browser tests read it)
  lastSeq: 0, missed: 0, messages: 0, points: 0, redraws: 0, dropped: 0, estimates: 0, corrections: 0,
  connected: false, run: null, replay: null, status: null, name: null, role: null, rebuilt: 0, rebuilding: false,
};
window.hilStats = S;
const live = new PlotGroup("live");
const streams = new Map();   // stream name -> StreamPlot
const estimates = new Map(); // online stream -> {kind, body, history}
const ended = new Set();     // sessions of runs that ended: a late status of theirs is not the current run's
const endedRuns = new Set(); // ids of runs that ended: a runs list fetched before the end cannot revive one
let correction = null;
let pending = [];            // live messages that arrived while the page rebuilt the run from the store
let liveEpoch = 0;           // counts the live view's fresh starts (clearLive): a rebuild from before one is not drawn
let rebuildEpoch = null;     // the fresh start whose rebuild holds the live messages back now
// The run's pauses (s), for the time left, which stands still while paused: the recorded commands (`record`,
// at the times the run took them) and, until their record is heard, the statuses (`seen`, polled: late by up
// to a poll, and one polled before a command may arrive after its record).
let pauses = {record: [], seen: {since: null, end: null, total: 0}};

function plotWidth() { return Math.max(300, $("plots").clientWidth - 10); }

// ------------------------------------------------------------------------------------------ sign-in
async function whoAmI() {
  try {
    const me = await api("GET", "/api/me");
    S.name = me.name;
    S.role = me.role;
  } catch (e) { S.role = null; }
  $("me").textContent = S.role ? `${S.name} (${S.role === "viewer" ? "viewer: read-only" : "operator"})` : "not signed in";
  $("token-form").hidden = S.role === "operator";
  updateControls();
}
function initSignIn() {
  if (new URLSearchParams(location.search).get("login") === "failed") {
    say("the token in that link is not one of this server's: ask for a new link or enter a token");
    history.replaceState(null, "", "/" + location.hash);
  }
  $("token-form").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      await api("POST", "/api/login", {token: $("token-input").value.trim()});
      $("token-input").value = "";
      say("");
      await whoAmI();
      refreshAll();
      reconnect();
    } catch (e) { say("sign-in: " + e.message); }
  });
}

// ------------------------------------------------------------------------------------------ live plots
function streamFor(name, channels, units) {
  let s = streams.get(name);
  if (!s || s.channels.join() !== channels.join()) {
    if (s) s.remove();
    s = new StreamPlot(live, $("plots"), name, channels, units, plotWidth());
    streams.set(name, s);
  }
  return s;
}
function onFrame(m) {
  const s = streamFor(m.stream, m.channels, m.units);
  let t = m.t, data = m.data, lo = m.min, hi = m.max, n = m.n;
  if (s.lastT != null && t.length) {
    if (t[t.length - 1] <= s.lastT) return;  // the store gave it already
    const j0 = t.findIndex((x) => x > s.lastT);
    if (j0 > 0) {  // the store gave its first samples (a frame live while the page rebuilt): the rest only
      const rest = (cols) => cols && cols.map((c) => c && c.slice(j0));
      n = n && Math.round(n * (t.length - j0) / t.length);
      t = t.slice(j0); data = rest(data); lo = rest(lo); hi = rest(hi);
    }
  }
  s.push(t, data, lo, hi, n);
}
function onCorrection(m) {
  if (!correction) {
    const force = streams.get(m.stream.split(".")[0] + ".force");
    const i = force ? force.channels.indexOf("force") : -1;
    correction = new CorrectionPlot($("correction"), m.stream, i >= 0 ? force.units[i] : "N", plotWidth());
    if (m.session) {  // the tolerance of the run's config, once
      api("GET", "/api/sessions/" + encodeURIComponent(m.session)).then((d) => {
        const tol = d && d.config && d.config.correction && d.config.correction.tolerance;
        if (correction && typeof tol === "number") correction.setTolerance(tol);
      }).catch(() => {});
    }
  }
  correction.push(m.body || {});
}
function clearLive() {
  liveEpoch++;
  pending = [];  // held back for the view before this one: the next rebuild reads the run from the store
  live.clear();
  streams.clear();
  if (correction) { correction.remove(); correction = null; }
  estimates.clear();
  renderEstimates();
}
// Drawn in the browser's next animation frame, one draw per frame at most: on a busy machine frames come late,
// and draws timed by the interval alone queued up behind each other and held back the page's input (a click
// took 20 s with the machine's cores taken).
let drawPending = false;
setInterval(() => {
  if (drawPending) return;
  drawPending = true;
  requestAnimationFrame(() => {
    drawPending = false;
    for (const s of streams.values()) s.draw();
    if (correction) correction.draw();
    $("points").textContent = `${S.points} points, ${S.redraws} redraws`;
    $("points").dataset.points = String(S.points);
    showProgress();
  });
}, REDRAW_MS);
window.addEventListener("resize", () => {
  for (const s of streams.values()) s.resize(plotWidth());
  if (correction) correction.resize(plotWidth());
});

// The run so far from the store (a reload, or a browser that joins late): plots, estimates, corrections.
async function rebuild(session) {
  const epoch = liveEpoch;
  rebuildEpoch = epoch;
  S.rebuilding = true;
  try {
    const [ser, sm] = await Promise.all([api("GET", `/api/sessions/${encodeURIComponent(session)}/series?points=${CAP}`),
                                         api("GET", `/api/sessions/${encodeURIComponent(session)}/summary`)]);
    if (epoch === liveEpoch) {  // else the view started over meanwhile (a new run, a reconnect): not its run
      for (const s of ser.streams) {
        const before = S.points;
        fillFromSeries(streamFor(s.stream, s.channels, s.units), s);
        S.rebuilt += S.points - before;
      }
      for (const e of sm.estimates) onEstimate(e);
      for (const c of sm.corrections) onCorrection({...c, session});
      pausesFrom(sm.actions || []);
    }
  } catch (e) { if (epoch === liveEpoch) say("the run so far: " + e.message); }
  if (rebuildEpoch !== epoch) return;  // a newer rebuild holds the live messages back now: it lets them go
  rebuildEpoch = null;
  S.rebuilding = false;
  const later = pending;
  pending = [];
  for (const m of later) onMessage(m);
}

// ------------------------------------------------------------------------------------------ estimates
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
  renderEstimatesInto($("estimates"), estimates, S.run || S.replay ?
    "no online estimate published so far (this run may not estimate online)" : "no run in progress");
}

// ------------------------------------------------------------------------------------------ live socket
let ws = null;
let retry = null;
function reconnect() {
  if (ws) { ws.onclose = null; ws.close(); }
  ws = new WebSocket((location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/ws/live");
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
  if (S.rebuilding && (m.type === "frame" || m.type === "event")) { pending.push(m); return; }
  S.messages++;
  if (S.lastSeq && m.seq > S.lastSeq + 1) S.missed += m.seq - S.lastSeq - 1;
  S.lastSeq = m.seq;
  switch (m.type) {
    case "hello": onHello(m); break;
    case "frame": onFrame(m); break;
    case "event":
      if (m.kind === "estimate" || m.kind === "estimate_failed") onEstimate(m);
      if (m.kind === "plan_outcome") showOutcome(m.body);
      if (m.kind === "setpoint_reached" || m.kind === "setpoint_not_reached") onCorrection(m);
      if (m.kind === "command") pausesFrom([m], true);
      logEvent(m);
      break;
    case "status": onStatus(m); break;
    case "replay": onReplay(m); break;
    case "run":
      if (m.state === "started") { newRun(m.run); setTimeout(refreshSessions, 1000); }
      if (m.state === "ended") { runEnded(m.run); refreshSessions(); setTimeout(refreshSessions, 2000); }
      refreshRuns();
      break;
    case "queue": refreshRuns(); break;
    case "stats": S.dropped = m.dropped; break;
  }
  $("counters").textContent = `seq ${S.lastSeq} · missed ${S.missed} · dropped by the server ${S.dropped}`;
}

function onHello(m) {
  clearLive();
  pauses = {record: [], seen: {since: null, end: null, total: 0}};  // they come again from status and record
  S.run = m.run;
  live.t0 = m.run ? m.run.started_at : null;
  if (m.replay) onReplay({state: "started", replay: m.replay});
  if (m.status) onStatus(m.status);
  const session = (m.run && m.run.session) || (m.status && m.status.session);
  if (m.run && session) {
    rebuild(session);
  } else {
    for (const e of m.estimates || []) onEstimate(e);
  }
  refreshRuns();
}

// The run's recorded commands: the whole record after a reload, or one live command event (`more`).
function pausesFrom(actions, more = false) {
  const known = more ? pauses.record : [];
  for (const a of actions) {
    const c = a.kind === "command" && a.body ? a.body.command : null;
    if (["pause", "resume", "stop", "abort"].includes(c) && !known.some((k) => k.t === a.t && k.c === c)) known.push({c, t: a.t});
  }
  known.sort((x, y) => x.t - y.t);
  pauses.record = known;
}
// The run's state as a status says it, timed when the page hears it.
function trackPause(state) {
  const seen = pauses.seen, now = Date.now() / 1000;
  if (state === "paused" && seen.since == null) seen.since = now;
  else if (state !== "paused" && seen.since != null) { seen.total += now - seen.since; seen.since = null; seen.end = now; }
}
// {since, total}: the open pause's start (null when running) and the time paused before it. The record decides
// once it holds a pause; the statuses stand in where it is silent: a run with no pause recorded (its records
// lost on a stalled bus), a pause or its end whose record is not heard yet.
function pausedNow() {
  const seen = pauses.seen;
  if (!pauses.record.some((a) => a.c === "pause")) return {since: seen.since, total: seen.total};
  let since = null, total = 0;
  for (const a of pauses.record) {
    if (a.c === "pause") since = since ?? a.t;
    else if (since != null) { total += a.t - since; since = null; }
  }
  if (since != null && seen.since == null && seen.end != null && seen.end > since) {
    total += seen.end - since;  // a status said it runs again; the end's record is still on its way
    since = null;
  }
  if (since == null && seen.since != null && !(seen.since < pauses.record[pauses.record.length - 1].t)) {
    since = seen.since;  // a status says paused; the pause's record is still on its way
  }
  return {since, total};
}

function newRun(run) {
  clearLive();
  pauses = {record: [], seen: {since: null, end: null, total: 0}};
  $("replay-box").hidden = true;
  $("events").innerHTML = "";
  $("outcome").hidden = true;
  S.run = run;
  S.status = null;
  live.t0 = run ? run.started_at : null;
  if (run) showRun(run);
  renderEstimates();
}
function runEnded(run) {
  if (!run) return;
  if (run.session) ended.add(run.session);
  endedRuns.add(run.id);
  trackPause("ended");
  S.run = null;
  showRun(run);
  const w = endWords(run.status, run.reason);
  $("run-state").textContent = w.text;
  $("run-state").title = w.detail;
  $("run-state").className = "pill " + w.cls;
  finalProgress(run);
  if (run.status === "failed" || (!run.session && run.reason)) showOutcome({status: run.status, reason: run.reason, safe: run.safe});
  updateControls();
}
function showRun(run) {
  $("run-none").hidden = true;
  $("run-box").hidden = false;
  $("run-config").textContent = run.config;
  $("run-kind").textContent = run.kind || "";
  $("run-by").textContent = run.by;
  $("run-box").dataset.run = run.id;
  $("run-session").textContent = run.session || "-";
  $("run-link").href = `#/runs/${encodeURIComponent(run.id)}`;
}

// A replayed session (POST /api/replays): the same plots, marked as a replay; a looping replay's next pass
// starts the plots over (its times begin again).
function onReplay(m) {
  const r = m.replay;
  if (m.state === "started") {
    newRun(null);
    S.replay = r;
    renderEstimates();
  } else if (m.state === "pass") {
    clearLive();
  }
  const box = $("replay-box");
  box.hidden = false;
  box.dataset.replay = r.id;
  $("replay-session").textContent = r.session;
  $("replay-info").textContent = `${r.kind}, ${num(r.speed, 3)}× the recorded pace${r.loop ? ", looping" : ""}, ` +
    `pass ${Math.max(1, r.passes)}, started by ${r.by}`;
  $("replay-state").textContent = m.state === "ended" ? endText(r.status, r.reason) : "replaying";
  $("replay-state").className = "pill " + (m.state === "ended" ? "" : "running");
  $("btn-replay-stop").hidden = m.state === "ended";
  $("btn-replay-stop").disabled = S.role !== "operator";
  if (m.state === "ended") S.replay = null;
}
function onStatus(st) {
  if (st.session && ended.has(st.session)) return;  // the previous run's last word
  if (st.state === "replaying" || (S.replay && st.session === S.replay.session)) {
    const p = st.progress || {};
    $("replay-progress").textContent = `${p.done || 0} of ${p.total || 0} messages`;
    return;
  }
  S.status = st;
  trackPause(st.state);
  $("run-state").textContent = st.state || "";
  $("run-state").className = "pill " + (st.state || "");
  if (st.session) $("run-session").textContent = st.session;
  updateControls();
}
// progress: steps done of the total, time since the run started and an estimate of the time left
function showProgress() {
  const st = S.status, run = S.run;
  if (!st || !run) return;
  const p = st.progress || {}, total = p.total || 0, done = p.done || 0;
  $("run-progress").max = total || 1;
  $("run-progress").value = total ? Math.min(done, total) : 0;
  const now = Date.now() / 1000;
  const elapsed = run.started_at ? now - run.started_at : null;
  // the time left from the time spent running (pauses left out): it stands still while paused
  const paused = pausedNow();
  const active = elapsed == null ? null : elapsed - paused.total - (paused.since != null ? now - paused.since : 0);
  const left = total && done && active != null ? Math.max(0, active) * (total - done) / done : null;
  $("run-progress-text").textContent = (total ? `step ${done} of ${total}` : `step ${done}`) +
    (p.label ? ` (last: ${p.label})` : "") + (elapsed != null ? ` · ${fmtDuration(elapsed)} since the start` : "") +
    (left != null ? ` · about ${fmtDuration(left)} left${paused.since != null ? " (paused)" : ""}` : "");
}
// after the end: how far it got and how long it ran, no time left
function finalProgress(run) {
  const p = (S.status && S.status.progress) || {}, total = p.total || 0, done = p.done || 0;
  const ran = run.started_at && run.ended_at ? run.ended_at - run.started_at : null, paused = pausedNow();
  $("run-progress-text").textContent = (total ? `step ${done} of ${total}` : `step ${done}`) +
    (ran != null ? ` · ran ${fmtDuration(ran)}` : "") + (paused.total > 0.5 ? `, of it paused ${fmtDuration(paused.total)}` : "");
}
// the buttons a run's state allows (and only for an operator's token)
function updateControls() {
  const state = S.run && S.status ? S.status.state : null;
  const operator = S.role === "operator";
  const allowed = {pause: state === "running", resume: state === "paused",
                   stop: state === "running" || state === "paused", abort: ["running", "paused", "stopping"].includes(state)};
  for (const [action, ok] of Object.entries(allowed)) {
    const b = $("btn-" + action);
    b.disabled = !(ok && operator);
    b.title = !operator ? "needs an operator's token (sign in)" : ok ? b.dataset.help : `not while the run is ${state || "not running"}`;
  }
}

function showOutcome(b) {
  const box = $("outcome");
  box.hidden = false;
  const w = endWords(b.status, b.reason);
  box.className = "outcome " + (b.safe === false || w.cls === "fault" ? "unsafe" : w.cls === "stopped" ? "stopped" : "safe");
  box.textContent = `${endText(b.status, b.reason)} · safe state ${b.safe ? "confirmed" :
    b.safe == null ? "not reached (the run never moved the rig)" : "NOT CONFIRMED: " + (b.safe_errors || []).join("; ")}`;
}

function logEvent(m) {
  const li = document.createElement("li");
  const force = streams.get(String(m.stream).split(".")[0] + ".force");
  const i = force ? force.channels.indexOf("force") : -1;
  const at = live.t0 ? `${num(m.t - live.t0, 4)} s` : fmtTime(m.t);
  li.dataset.kind = m.kind;
  li.innerHTML = `<span class="at">${esc(at)}</span> <span class="muted">${esc(m.stream)}</span> ` +
    esc(eventWords(m, i >= 0 ? force.units[i] : "N"));
  const list = $("events");
  list.insertBefore(li, list.firstChild);
  while (list.children.length > MAX_EVENTS) list.removeChild(list.lastChild);
}

// ------------------------------------------------------------------------------------------ tables
// a template's values the site must still supply, one per line as `hil check` prints them
function unsuppliedList(lines) {
  return lines && lines.length ? "<ul>" + lines.map((l) => `<li>${esc(l)}</li>`).join("") + "</ul>" : "";
}

async function refreshConfigs() {
  try {
    const configs = await api("GET", "/api/configs");
    $("configs").tBodies[0].innerHTML = configs.map((c) => `<tr><td>${esc(c.name)}</td><td>${esc(c.kind || "")}` +
      `${c.simulated ? ' <span class="muted">sim</span>' : ""}</td><td class="${c.ok ? "ok" : "error"}">` +
      `${c.ok ? "ok" : esc(c.error) + unsuppliedList(c.unsupplied)}</td><td>${c.ok ? `<button data-run="${esc(c.name)}"${S.role === "operator" ? "" : " disabled"}>run</button>` : '<span class="muted">not runnable</span>'}</td></tr>`).join("");
  } catch (e) { say("configs: " + e.message); }
}

async function refreshRuns() {
  let snap;
  try { snap = await api("GET", "/api/runs"); } catch (e) { say("runs: " + e.message); return; }
  showRuns(snap);
}
// the runs list; its current run only if it has not ended meanwhile (the list may have been asked for before
// the end, and answered after it: that run must not come back as the current one, with time left and a Stop)
function showRuns(snap) {
  const cur = snap.current && !endedRuns.has(snap.current.id) ? snap.current : null;
  if (cur) {
    if (!S.run || S.run.id !== cur.id) { S.run = cur; live.t0 = live.t0 || cur.started_at; }
    S.run.session = cur.session;
    showRun(cur);
    if (cur.live) onStatus(cur.live);
  } else if (!S.run && $("run-box").dataset.run === undefined) {
    $("run-none").hidden = false;
  }
  $("queue").tBodies[0].innerHTML = snap.queued.map((e) => `<tr><td><code>${esc(e.id)}</code></td><td>${esc(e.config)}</td>` +
    `<td>${esc(e.kind || "")}</td><td>${esc(e.by)}</td><td><button data-delete="${esc(e.id)}"${S.role === "operator" ? "" : " disabled"}>delete</button></td></tr>`).join("") ||
    '<tr><td colspan="5" class="muted">empty</td></tr>';
  $("finished").tBodies[0].innerHTML = snap.finished.map((e) => `<tr><td><a href="#/runs/${esc(e.id)}">${esc(e.config)}</a></td>` +
    `${statusCell(e.status, e.reason)}` +
    `<td class="${e.safe ? "ok" : "error"}">${e.safe == null ? "" : e.safe ? "safe" : "NOT SAFE"}</td>` +
    `<td>${esc(e.by)}</td><td class="reason">${endWords(e.status, e.reason).cls === "fault" ? esc(e.reason || "") : ""}</td></tr>`).join("");
}
// a status in words, coloured: green done, neutral stopped by someone, red a fault
function statusCell(status, reason) {
  const w = endWords(status, reason);
  return `<td class="status ${w.cls}">${esc(w.text)}${w.detail ? `<div class="reason">${esc(w.detail)}</div>` : ""}</td>`;
}

// "yes" linked to the session in each lab that holds it verified (hil lab push), else nothing
function labCell(labs) {
  return (labs || []).map((l) => l.link ? `<a href="${esc(l.link)}" target="_blank" rel="noopener noreferrer" ` +
    `title="${esc(l.url)}" data-lab-link>yes</a>` : `<span title="${esc(l.url)}">yes</span>`).join(" ");
}

async function refreshSessions() {
  try {
    const sessions = await api("GET", "/api/sessions");
    sessions.sort((a, b) => b.started - a.started);
    $("sessions").tBodies[0].innerHTML = sessions.slice(0, 200).map((s) => `<tr><td><a href="#/sessions/${esc(s.id)}" data-session-link="${esc(s.id)}">` +
      `${esc(s.id)}</a></td><td>${esc(s.kind)}</td>${statusCell(s.status, s.reason)}` +
      `<td>${fmtTime(s.started)}</td><td>${esc(s.started_by || "")}</td><td>${labCell(s.lab)}</td><td>` + ["hdf5", "mat", "csv"].map((f) =>
        `<a href="/api/sessions/${esc(s.id)}/export?format=${f}">${f}</a>`).join(" ") +
      `</td><td><button data-replay="${esc(s.id)}" title="play it on the live view"${S.role === "operator" ? "" : " disabled"}>replay</button></td></tr>`).join("");
  } catch (e) { say("sessions: " + e.message); }
}

document.addEventListener("click", async (ev) => {
  const t = ev.target;
  try {
    if (t.dataset.run) { await api("POST", "/api/runs", {config: t.dataset.run}); say(""); refreshRuns(); }
    else if (t.dataset.delete) { await api("DELETE", "/api/runs/" + t.dataset.delete); refreshRuns(); }
    else if (t.dataset.action) {
      const st = await api("POST", `/api/runs/${$("run-box").dataset.run}/${t.dataset.action}`);
      onStatus(st);
    } else if (t.dataset.replay) {
      await api("POST", "/api/replays", {session: t.dataset.replay, speed: Number($("replay-speed").value),
                                         loop: $("replay-loop").checked});
      location.hash = "";
      say("");
    } else if (t.id === "btn-replay-stop") { await api("POST", `/api/replays/${$("replay-box").dataset.replay}/stop`); }
    else if (t.dataset.analyze) { await api("POST", `/api/sessions/${t.dataset.analyze}/analysis`); showAnalysis(t.dataset.analyze); }
  } catch (e) { say(e.message); }
});

function refreshAll() { refreshConfigs(); refreshRuns(); refreshSessions(); }
initSignIn();
whoAmI().then(refreshAll);
reconnect();
route();
window.addEventListener("hashchange", route);
setInterval(refreshRuns, 3000);
setInterval(refreshSessions, 15000);
