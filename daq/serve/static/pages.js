// hil serve dashboard, a page per run (#/runs/ID) and per session (#/sessions/ID): the outcome and the
// safe state in words, who started it and who commanded it, the final estimates and verdicts with units,
// the recorded streams (reduced by the server with their min/max envelope), the analysis and its plots,
// the downloads and the config. They stay when the next run starts.
"use strict";

const pageGroup = new PlotGroup("page");
const STORED_POINTS = 2000;   // points per stream on a page
let pageAsked = 0;            // counts the pages asked for: a page answered after the next was asked for is dropped

function route() {
  const m = location.hash.match(/^#\/(runs|sessions)\/([^/]+)$/);
  $("live").hidden = !!m;
  $("page").hidden = !m;
  pageGroup.clear();
  pageAsked++;
  if (!m) return;
  const id = decodeURIComponent(m[2]);
  if (m[1] === "runs") showRunPage(id); else showSessionPage(id);
}

function pageBox(title) {
  const box = $("page-body");
  $("page-title").textContent = title;
  box.innerHTML = '<span class="muted">loading ...</span>';
  box.dataset.ready = "0";
  return box;
}

async function showRunPage(id) {
  const asked = pageAsked;
  const box = pageBox(`run ${id}`);
  let run;
  try { run = await api("GET", `/api/runs/${encodeURIComponent(id)}`); } catch (e) {
    if (asked === pageAsked) box.innerHTML = `<div class="outcome unsafe">${esc(e.message)}</div>`;
    return;
  }
  if (asked !== pageAsked) return;  // another page was asked for meanwhile: it owns the box now
  $("page-title").textContent = `run ${run.id}: ${run.config}`;
  const facts = [["config", run.config], ["rig kind", run.kind || "-"], ["queued", `${fmtTime(run.queued_at)} by ${run.by}`],
    ["started", fmtTime(run.started_at)], ["ended", fmtTime(run.ended_at)],
    ["duration", run.started_at && run.ended_at ? fmtDuration(run.ended_at - run.started_at) : "-"]];
  box.innerHTML = `<div class="outcome ${outcomeClass(run.status, run.reason, run.safe)}" id="page-outcome">` +
    `${esc(outcomeWords(run.status, run.reason, run.safe, run.result && run.result.safe_errors))}</div>` +
    factsTable(facts) + '<div id="page-session"></div>';
  if (run.session) await renderSession(run.session, $("page-session"), run, asked);
  if (asked === pageAsked) box.dataset.ready = "1";
}

async function showSessionPage(id) {
  const asked = pageAsked;
  const box = pageBox(`session ${id}`);
  box.innerHTML = '<div id="page-session"></div>';
  await renderSession(id, $("page-session"), null, asked);
  if (asked === pageAsked) box.dataset.ready = "1";
}

function outcomeWords(status, reason, safe, errors) {
  if (status === "queued" || status === "running") return `${status}${reason ? ": " + reason : ""}`;
  const safeText = safe ? "safe state confirmed" : safe == null ? "the rig was never moved (no safe state needed)" :
    "safe state NOT CONFIRMED" + (errors && errors.length ? ": " + errors.join("; ") : "");
  const w = endWords(status, reason);
  return `${w.text}${w.detail ? (w.cls === "fault" ? ": " : " ") + w.detail : ""} · ${safeText}`;
}
// the outcome box's colour: red for a fault or an unconfirmed safe state only; an operator's stop is neutral
function outcomeClass(status, reason, safe) {
  const cls = endWords(status, reason).cls;
  return safe === false || cls === "fault" ? "unsafe" : cls === "stopped" ? "stopped" : "safe";
}
function factsTable(rows) {
  return '<table class="facts">' + rows.map(([k, v]) => `<tr><th>${esc(k)}</th><td>${esc(v)}</td></tr>`).join("") + "</table>";
}

async function renderSession(id, el, run, asked) {
  let d, sm, ser;
  try {
    [d, sm, ser] = await Promise.all([api("GET", `/api/sessions/${encodeURIComponent(id)}`),
      api("GET", `/api/sessions/${encodeURIComponent(id)}/summary`),
      api("GET", `/api/sessions/${encodeURIComponent(id)}/series?points=${STORED_POINTS}`)]);
  } catch (e) {
    if (asked === pageAsked) el.innerHTML = `<div class="outcome unsafe">session ${esc(id)}: ${esc(e.message)}</div>`;
    return;
  }
  if (asked !== pageAsked) return;
  if (!run) $("page-title").textContent = `session ${d.id} (${d.kind})`;
  const o = sm.outcome || {};
  const facts = [["session", d.id], ["status", endText(d.status, d.reason)],
    ["started", `${fmtTime(d.started)} by ${d.started_by || "-"}`], ["ended", fmtTime(d.ended)],
    ["software", d.software_version || "-"]];
  const what = (a) => (a.kind === "command" && a.body && a.body.command ? a.body.command : a.kind);
  const actions = sm.actions.map((a) => `<li>${num(a.t - d.started, 4)} s: ${esc(what(a))}` +
    `${a.body && a.body.by ? " by " + esc(a.body.by) : ""}${a.body && a.body.reason ? " (" + esc(a.body.reason) + ")" : ""}</li>`);
  const est = new Map(sm.estimates.map((e) => [e.stream, {kind: e.kind, body: e.body, history: [e.body]}]));
  el.innerHTML = (run ? "" : `<div class="outcome ${outcomeClass(o.status || d.status, o.reason || d.reason, o.safe)}" id="page-outcome">` +
      `${esc(outcomeWords(o.status || d.status, o.reason || d.reason, o.safe, o.safe_errors))}</div>`) +
    factsTable(facts) +
    `<h3>Who did what</h3><ul class="actions">${actions.join("") || '<li class="muted">no record</li>'}</ul>` +
    `<h3>Final estimates</h3><div id="page-estimates"></div>` +
    `<h3>Recorded streams</h3><div class="muted">drag across a plot to zoom all of them, double-click to go back</div>` +
    `<div id="page-plots"></div>` +
    `<h3>Analysis</h3><div id="page-analysis" class="analysis" data-session="${esc(d.id)}"></div>` +
    `<h3>Downloads</h3><div>` + ["hdf5", "mat", "csv"].map((f) =>
      `<a href="/api/sessions/${esc(d.id)}/export?format=${f}">${f}</a>`).join(" · ") + "</div>" +
    `<h3>Config</h3><pre class="config">${esc(JSON.stringify(d.config, null, 1))}</pre>`;
  renderEstimatesInto($("page-estimates"), est, "this run published no online estimate");
  pageGroup.t0 = run && run.started_at ? run.started_at : d.started;
  const width = Math.max(300, $("page-plots").clientWidth - 10);
  for (const s of ser.streams) {
    const p = new StreamPlot(pageGroup, $("page-plots"), s.stream, s.channels, s.units, width);
    fillFromSeries(p, s);
    p.redraw();
  }
  for (const p of pageGroup.plots) p.redraw();  // one window for all, now that all are filled
  showAnalysis(d.id);
}

// The analysis' estimates with their units and 95 % intervals, and its verdict (GET .../analysis).
function analysisEstimates(a) {
  const rows = (a.estimates || []).map((e) => `<tr><td>${esc(e.name)}</td><td class="num">${esc(si(e.value, e.unit, 6))}</td>` +
    `<td class="num">${Array.isArray(e.interval) ? `[${esc(si(e.interval[0], e.unit, 5))}, ${esc(si(e.interval[1], e.unit, 5))}]` : ""}</td></tr>`);
  return (rows.length ? '<table class="estimates analysis-estimates"><thead><tr><th>parameter</th><th>estimate</th>' +
    `<th>95 % interval</th></tr></thead><tbody>${rows.join("")}</tbody></table>` : "") +
    (a.verdict ? `<div class="verdict">verdict: <b>${esc(a.verdict)}</b></div>` : "");
}

// The analysis `hil analyze --plots` makes of a session (run by the server in a process of its own).
async function showAnalysis(id) {
  const box = $("page-analysis");
  if (!box || box.dataset.session !== id) return;
  let a;
  try { a = await api("GET", `/api/sessions/${encodeURIComponent(id)}/analysis`); } catch (e) { box.textContent = e.message; return; }
  if (box.dataset.session !== a.session) return;
  const may = S.role === "operator" ? "" : ' disabled title="needs an operator\'s token"';
  if (a.state === "running") {
    box.innerHTML = '<span class="muted">analysing ...</span>';
    setTimeout(() => showAnalysis(id), 1000);
  } else if (a.state === "done") {
    box.innerHTML = `<button data-analyze="${esc(a.session)}"${may}>analyse again</button>` + analysisEstimates(a) +
      a.plots.map((f) => `<div><img alt="${esc(f)}" src="/api/sessions/${esc(a.session)}/analysis/${esc(f)}"></div>`).join("") +
      `<details><summary>report (hil analyze --json)</summary><pre>${esc(JSON.stringify(a.report, null, 1))}</pre></details>`;
  } else {
    box.innerHTML = `<button data-analyze="${esc(a.session)}"${may}>analyse</button>` +
      (a.state === "failed" ? ` <div class="error">${esc(a.error)}</div>` : ' <span class="muted">not analysed yet</span>');
  }
}
