// hil serve dashboard, what ended runs and events say in words: an operator's stop is "stopped by NAME" in
// a neutral colour (red is kept for faults: a failed run, an error, a safe state not confirmed), and an
// event is one line of time, kind and its main fields with units - never raw JSON.
"use strict";

const BY_OPERATOR = /^(stopped|aborted) by the operator(?: \(([^)]*)\))?\s*(.*)$/;
const FORCE_FIELDS = new Set(["q", "q_desired", "q_actual", "residual", "command", "tolerance"]);
const TIME_FIELDS = new Set(["t0", "trigger_t"]);  // absolute times (s since the epoch)

// Who: "token alice" (hil serve's API) -> "alice"; nothing -> "the operator".
function whoName(by) {
  const name = String(by || "").replace(/^token /, "").trim();
  return name || "the operator";
}

// How a run or session ended, in words: {text, detail, cls} with cls "done" (green), "stopped" (neutral:
// an operator's stop or abort) or "fault" (red). A stop whose safe state was not confirmed is a fault.
function endWords(status, reason) {
  const why = String(reason || "");
  if (status === "running" || status === "queued" || status === "replaying") return {text: status, detail: why, cls: "live"};
  if (status === "complete" && !why) return {text: "complete", detail: "", cls: "done"};
  const m = why.match(BY_OPERATOR);
  if (status === "aborted" && m && !/SAFE STATE NOT CONFIRMED/.test(why)) {
    return {text: `${m[1]} by ${whoName(m[2])}`, detail: m[3] || "", cls: "stopped"};
  }
  return {text: status || "-", detail: why, cls: status === "complete" ? "done" : "fault"};
}
function endText(status, reason) {
  const w = endWords(status, reason);
  return w.text + (w.detail ? ` (${w.detail})` : "");
}

// One field of an event in words with its unit, or null to leave it out (long arrays, nested records).
function fieldWords(key, v, units) {
  const unit = FORCE_FIELDS.has(key) ? units.force : ["z", "z_std"].includes(key) ? units.z :
    /(_s|^dt)$/.test(key) ? "s" : "";
  if (TIME_FIELDS.has(key) && typeof v === "number") return `${key.replace(/_/g, " ")} ${fmtTime(v)}`;
  if (typeof v === "number") return `${key.replace(/_/g, " ")} ${si(v, unit, 5)}`;
  if (typeof v === "string" || typeof v === "boolean") return `${key.replace(/_/g, " ")} ${v}`;
  if (Array.isArray(v) && v.length <= 6 && v.every((x) => typeof x === "number")) {
    return `${key.replace(/_/g, " ")} ${v.map((x) => si(x, unit, 4)).join(", ")}`;
  }
  if (Array.isArray(v)) return `${key.replace(/_/g, " ")} (${v.length} values)`;
  return null;
}

// An event's line after its time: "pause by alice", "setpoint reached: q desired 1 kN, residual 20 N, ...".
// `forceUnit`: the unit of the rig's force stream (the press's setpoints q are forces).
function eventWords(m, forceUnit) {
  const b = m.body || {}, kind = String(m.kind || "").replace(/_/g, " ");
  const units = {force: forceUnit || "N", z: typeof b.units === "string" ? b.units : ""};
  if (m.kind === "command") return `${b.command || "command"} by ${whoName(b.by)}`;
  if (m.kind === "started") return `run started by ${whoName(b.by)}`;
  if (m.kind === "plan_outcome") {
    const safe = b.safe ? "safe state confirmed" : b.safe == null ? "the rig was never moved" :
      "safe state NOT CONFIRMED" + (b.safe_errors && b.safe_errors.length ? ": " + b.safe_errors.join("; ") : "");
    return `outcome: ${endText(b.status, b.reason)} · ${safe}`;
  }
  if (m.kind === "safe_state") return b.safe ? "safe state reached" : `safe state NOT reached: ${(b.errors || []).join("; ")}`;
  if (m.kind === "estimate") {
    const names = b.parameters || [], us = b.units || [];
    return "estimate: " + names.map((p, i) => `${p} = ${si((b.values || [])[i], us[i] || "", 5)}`).join(", ") +
      (b.used != null ? ` (from ${b.used})` : "");
  }
  if (m.kind === "estimate_failed") return `estimate failed: ${b.error || ""}`;
  const skip = new Set(["units", "text"]);
  const fields = Object.entries(b).filter(([k]) => !skip.has(k)).map(([k, v]) => fieldWords(k, v, units))
    .filter((x) => x);
  if (typeof b.text === "string") fields.push(b.text.length > 80 ? b.text.slice(0, 80) + "…" : b.text);
  return kind + (fields.length ? ": " + fields.join(", ") : "");
}
