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
// "kg" takes prefixes as "g" does (1e-6 kg = 1 mg; 0.01 kg*m^2 = 10 g*m^2).
function siUnit(unit) { return /^kg(?![a-zA-Z])/.test(unit || "") ? ["g" + unit.slice(2), 1e3] : [unit || "", 1]; }
// A number with its unit and an SI prefix: 206959000 N/m -> "206.96 MN/m", 1.2e-5 m -> "12 µm".
function si(x, unit, digits = 5) {
  if (typeof x !== "number" || !isFinite(x)) return x == null ? "" : String(x);
  const [base, k] = siUnit(unit);
  const [f, p] = siPrefix(Math.abs(x * k), base);
  const u = base === "1" ? "" : base;
  return `${num(x * k / f, digits)}${u || p ? " " : ""}${p}${u}`;
}
// Where an axis has its ticks: the largest round step (1, 2, 2.5, 5 x 10^k) that still puts at least
// `least` ticks inside [lo, hi] - never one lone tick, however large the offset under the noise.
function niceSplits(lo, hi, least = 4) {
  if (!isFinite(lo) || !isFinite(hi)) return [];
  if (!(hi > lo)) return [lo];
  const top = 10 ** Math.ceil(Math.log10(hi - lo));
  for (let e = top; e > top * 1e-3; e /= 10) {
    for (const m of [0.5, 0.25, 0.2, 0.1]) {
      const step = e * m, a = Math.ceil(lo / step - 1e-9), b = Math.floor(hi / step + 1e-9);
      if (b - a + 1 >= least) return Array.from({length: b - a + 1}, (_, i) => Number(((a + i) * step).toPrecision(12)));
    }
  }
  return [lo, hi];
}
// Decimals that tell ticks `step` apart (in the prefixed unit): 0.001 -> 3, 0.25 -> 2, 20 -> 0; a step that
// is no round number (the ellipse's ends and middle) gets at most 3 significant digits of it.
function decimalsFor(step) {
  if (!(step > 0) || !isFinite(step)) return 0;
  const least = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
  let d = least;
  while (d < least + 2 && Math.abs(step * 10 ** d - Math.round(step * 10 ** d)) > 1e-6 * step * 10 ** d) d++;
  return d;
}
// Tick labels of one axis: one prefix for all ticks (its largest) and as many decimals as the step between
// ticks needs, so an offset stays readable: 600000 Pa +- 2 Pa -> "599.998 kPa", "600.000 kPa", "600.002 kPa".
function siTicks(unit) {
  return (u, splits) => {
    const [base, k] = siUnit(unit);
    const vals = splits.filter((v) => v != null && isFinite(v));
    const [f, p] = siPrefix(Math.max(...vals.map((v) => Math.abs(v * k))), base);
    const steps = vals.slice(1).map((v, i) => Math.abs(v - vals[i]) * k / f).filter((d) => d > 0);
    const dec = Math.min(decimalsFor(steps.length ? Math.min(...steps) : Math.abs(vals[0] * k / f || 1)), 12);
    const u2 = base === "1" ? "" : base;
    return splits.map((v) => v == null ? "" : `${(v * k / f).toFixed(dec).replace(/^-(0\.?0*)$/, "$1")}` +
      `${u2 || p ? " " : ""}${p}${u2}`);
  };
}
// A date and time as the CLI prints it (ISO 8601, local time) with the UTC offset: "2026-11-28 17:40:12 +01:00".
function fmtTime(t) {
  if (!t) return "-";
  const d = new Date(t * 1000), two = (x) => String(x).padStart(2, "0");
  const off = -d.getTimezoneOffset(), sign = off < 0 ? "-" : "+";
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${two(d.getHours())}:${two(d.getMinutes())}:` +
    `${two(d.getSeconds())} ${sign}${two(Math.floor(Math.abs(off) / 60))}:${two(Math.abs(off) % 60)}`;
}
// A duration in words: 75 -> "1 min 15 s", 359.7 -> "6 min 0 s" (never "5 min 60 s"), 7260 -> "2 h 1 min".
function fmtDuration(s) {
  if (typeof s !== "number" || !isFinite(s) || s < 0) return "-";
  if (s < 59.95) return `${num(s, s < 10 ? 2 : 3)} s`;
  if (s < 3570) {
    const r = Math.round(s);
    return `${Math.floor(r / 60)} min ${r % 60} s`;
  }
  const m = Math.round(s / 60);
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
