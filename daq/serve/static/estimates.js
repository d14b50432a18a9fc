// hil serve dashboard, online estimates (docs/contracts.md "Online estimates"): value, std and the 95 %
// interval with the parameter's unit and an SI prefix, the relative std, the verdict and the stop reason,
// and the 95 % confidence ellipse of the first two parameters with labelled axes (earlier ones fainter).
"use strict";

function verdictText(v) {
  if (!v) return "";
  if (v.error) return "error: " + v.error;
  if (typeof v.undecided === "string" && v.undecided && !v.models) return v.undecided;  // not computable yet
  let text;
  if (v.models && typeof v.models === "object") {
    text = Object.entries(v.models).map(([name, m]) => {
      m = (m && typeof m === "object") ? m : {verdict: String(m)};
      const word = m.verdict || (m.reject ? "reject" : "keep");
      // an undecided model shows why, never a number of its fit (which may be singular: k of 1e16 N/m)
      if (word === "undecided") return `${name} undecided` + (m.undecided ? ` (${m.undecided})` : "");
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

// e: {kind, body, history: [bodies]} per online stream
function estimatesHtml(map, emptyText) {
  const out = [];
  for (const [stream, e] of map) {
    const b = e.body;
    out.push(`<div class="est" data-stream="${esc(stream)}"><b>${esc(stream)}</b> <span class="muted">${esc(b.model || "")}` +
             ` used ${esc(b.used ?? b.series_used ?? "")}` + (b.elapsed_s != null ? `, fit ${si(b.elapsed_s, "s", 3)}` : "") + `</span>`);
    if (e.kind === "estimate_failed") {
      out.push(`<div class="error">estimate failed: ${esc(b.error || "")}</div></div>`);
      continue;
    }
    const names = b.parameters || (b.values || []).map((_, i) => "p" + i);
    const units = b.units || names.map(() => b.unit || "");
    out.push('<table class="estimates"><thead><tr><th>parameter</th><th>value</th><th>std</th>' +
             "<th>95 % interval</th><th>rel. std</th></tr></thead><tbody>");
    names.forEach((p, i) => {
      const v = (b.values || [])[i], s = (b.std || [])[i], r = (b.rel_std || [])[i], u = units[i] || "";
      const ok = typeof v === "number" && typeof s === "number";
      out.push(`<tr><td>${esc(p)}</td><td class="num">${esc(si(v, u, 6))}</td><td class="num">${esc(si(s, u, 3))}</td>` +
               `<td class="num">${ok ? `[${esc(si(v - 1.96 * s, u, 5))}, ${esc(si(v + 1.96 * s, u, 5))}]` : ""}</td>` +
               `<td class="num">${typeof r === "number" ? num(100 * r, 3) + " %" : ""}</td></tr>`);
    });
    out.push("</tbody></table>");
    if (b.verdict) out.push(`<div class="verdict">verdict: <b>${esc(verdictText(b.verdict))}</b></div>`);
    if (b.stop) out.push(`<div class="verdict">stop: <b>${esc(b.stop)}</b></div>`);
    if (Array.isArray(b.covariance) && names.length >= 2) out.push(`<canvas class="ellipse" width="320" height="240" data-stream="${esc(stream)}"></canvas>`);
    out.push("</div>");
  }
  return out.join("") || `<span class="muted">${esc(emptyText)}</span>`;
}

function renderEstimatesInto(box, map, emptyText) {
  box.innerHTML = estimatesHtml(map, emptyText);
  for (const c of box.querySelectorAll("canvas.ellipse")) drawEllipse(c, map.get(c.dataset.stream));
}

function ellipseShape(b) {
  const [a, c, d] = [b.covariance[0][0], b.covariance[0][1], b.covariance[1][1]];
  const tr = a + d, det = a * d - c * c, disc = Math.sqrt(Math.max(0, tr * tr / 4 - det));
  const l1 = tr / 2 + disc, l2 = Math.max(0, tr / 2 - disc);
  const ang = Math.abs(c) > 0 ? Math.atan2(l1 - a, c) : (a >= d ? 0 : Math.PI / 2);
  return {x: b.values[0], y: b.values[1], r1: Math.sqrt(5.991 * l1), r2: Math.sqrt(5.991 * l2), ang};
}

// The 95 % ellipse (chi2, 2 dof: 5.991) on axes with ticks in the parameters' units.
function drawEllipse(canvas, e) {
  const g = canvas.getContext("2d"), W = canvas.width, H = canvas.height;
  const L = 70, B = 34, T = 18, R = 10;  // margins: axis labels left and below
  const shapes = e.history.filter((b) => Array.isArray(b.covariance) && b.covariance.length >= 2).map(ellipseShape)
    .filter((s) => [s.x, s.y, s.r1, s.r2].every(isFinite));
  g.clearRect(0, 0, W, H);
  if (!shapes.length) return;
  const rings = shapes.map((s) => Array.from({length: 48}, (_, i) => {
    const a = 2 * Math.PI * i / 48, u = s.r1 * Math.cos(a), v = s.r2 * Math.sin(a);
    return [s.x + u * Math.cos(s.ang) - v * Math.sin(s.ang), s.y + u * Math.sin(s.ang) + v * Math.cos(s.ang)];
  }));
  const flat = rings.flat();
  let [x0, x1] = [Math.min(...flat.map((p) => p[0])), Math.max(...flat.map((p) => p[0]))];
  let [y0, y1] = [Math.min(...flat.map((p) => p[1])), Math.max(...flat.map((p) => p[1]))];
  if (!(x1 > x0)) { x0 -= 1e-12; x1 += 1e-12; }
  if (!(y1 > y0)) { y0 -= 1e-12; y1 += 1e-12; }
  const px = (x) => L + (W - L - R) * (x - x0) / (x1 - x0), py = (y) => H - B - (H - B - T) * (y - y0) / (y1 - y0);
  rings.forEach((ring, k) => {
    g.beginPath();
    g.strokeStyle = k === rings.length - 1 ? "#1e88e5" : "rgba(30,136,229,0.25)";
    ring.forEach(([x, y], i) => (i ? g.lineTo(px(x), py(y)) : g.moveTo(px(x), py(y))));
    g.closePath();
    g.stroke();
  });
  const names = e.body.parameters || ["p0", "p1"];
  const units = e.body.units || ["", ""];
  g.strokeStyle = "#888";
  g.fillStyle = "#444";
  g.font = "11px sans-serif";
  g.beginPath();
  g.moveTo(L, T); g.lineTo(L, H - B); g.lineTo(W - R, H - B);
  g.stroke();
  const xt = siTicks(units[0] || "")(null, [x0, (x0 + x1) / 2, x1]);
  const yt = siTicks(units[1] || "")(null, [y0, (y0 + y1) / 2, y1]);
  [x0, (x0 + x1) / 2, x1].forEach((x, i) => {
    g.textAlign = i === 0 ? "left" : i === 2 ? "right" : "center";
    g.fillText(xt[i], px(x), H - B + 13);
  });
  g.textAlign = "right";
  [y0, (y0 + y1) / 2, y1].forEach((y, i) => g.fillText(yt[i], L - 4, py(y) + 4));
  const xLabel = `${names[0]}${units[0] && units[0] !== "1" ? ` [${units[0]}]` : ""}`;
  const yLabel = `95 % ellipse · y: ${names[1]}${units[1] && units[1] !== "1" ? ` [${units[1]}]` : ""}`;
  g.textAlign = "center";
  g.fillText(xLabel, L + (W - L - R) / 2, H - 4);
  g.textAlign = "left";
  g.fillText(yLabel, 4, 12);
  canvas.dataset.axes = JSON.stringify({x: xt, y: yt, xLabel, yLabel});  // what was drawn, in words
}
