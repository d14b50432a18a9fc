// hil serve dashboard, shared helpers: HTML escaping, numbers with SI prefixes and units, times, the API.
// The page signs in with an HttpOnly cookie (docs/api.md): no token is ever in a URL or readable here.
"use strict";

const $ = (id) => document.getElementById(id);
const PREFIXES = [[1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"], [1, ""], [1e-3, "m"], [1e-6, "µ"],
  [1e-9, "n"], [1e-12, "p"]];
const NO_PREFIX = new Set(["", "1", "%", "°C", "degC", "dB", "-", "deg", "°", "count", "bool", "rpm"]);

function esc(x) {
  return String(x).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}
function num(x, digits = 5) {
  return typeof x === "number" && isFinite(x) ? Number(x.toPrecision(digits)).toString() : (x == null ? "" : String(x));
}
// The prefix [factor, letter] for numbers up to maxAbs in `unit` (none for unitless or non-SI units).
function siPrefix(maxAbs, unit) {
  if (NO_PREFIX.has(unit || "") || !(maxAbs > 0) || !isFinite(maxAbs)) return [1, ""];
  for (const [f, p] of PREFIXES) if (maxAbs >= f * 0.9995) return [f, p];
  return PREFIXES[PREFIXES.length - 1];
}
// "kg" takes prefixes as "g" does (1e-6 kg = 1 mg).
function siUnit(unit) { return unit === "kg" ? ["g", 1e3] : [unit || "", 1]; }
// A number with its unit and an SI prefix: 206959000 N/m -> "206.96 MN/m", 1.2e-5 m -> "12 µm".
function si(x, unit, digits = 5) {
  if (typeof x !== "number" || !isFinite(x)) return x == null ? "" : String(x);
  const [base, k] = siUnit(unit);
  const [f, p] = siPrefix(Math.abs(x * k), base);
  const u = base === "1" ? "" : base;
  return `${num(x * k / f, digits)}${u || p ? " " : ""}${p}${u}`;
}
// Tick labels of one axis: one prefix for all ticks of the axis (its largest), e.g. "-20 µm".
function siTicks(unit) {
  return (u, splits) => {
    const [base, k] = siUnit(unit);
    const [f, p] = siPrefix(Math.max(...splits.map((v) => Math.abs(v * k))), base);
    const u2 = base === "1" ? "" : base;
    return splits.map((v) => v == null ? "" : `${num(v * k / f, 4)}${u2 || p ? " " : ""}${p}${u2}`);
  };
}
function fmtTime(t) { return t ? new Date(t * 1000).toLocaleString() : "-"; }
// A duration in words: 75 -> "1 min 15 s".
function fmtDuration(s) {
  if (typeof s !== "number" || !isFinite(s) || s < 0) return "-";
  if (s < 60) return `${num(s, s < 10 ? 2 : 3)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s - 60 * m)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}
function say(text) {
  $("message").textContent = text || "";
  $("message").hidden = !text;
}

// JSON API calls; the cookie goes along by itself (same origin). An error is thrown as its one line.
async function api(method, path, body) {
  const headers = {};
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch(path, {method, headers, credentials: "same-origin",
                               body: body === undefined ? undefined : JSON.stringify(body)});
  let data = null;
  try { data = await r.json(); } catch (e) { data = null; }
  if (r.status === 401) $("token-form").hidden = false;
  if (!r.ok) throw new Error((data && data.error) || `${r.status} ${r.statusText}`);
  return data;
}
