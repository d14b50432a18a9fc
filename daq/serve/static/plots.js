// hil serve dashboard, time plots (uPlot): one plot per stream with its channels and units, ticks and
// legend values with SI prefixes, time in s since the run started, one time window for all plots (a
// zoom - drag across a plot - zooms them all; a double click goes back), gaps between measurement windows
// drawn as gaps, and the min/max envelope of what was decimated for display with a note saying so.
"use strict";

const CAP = 4000;            // points per stream kept (the newest): memory stays flat however long the run
const GAP_FACTOR = 5;        // a step in time over 5 typical spacings (and over MIN_GAP_S) is a gap
const MIN_GAP_S = 0.05;
const COLORS = ["#1e88e5", "#e53935", "#43a047", "#fb8c00", "#8e24aa", "#00897b", "#6d4c41", "#3949ab"];

// What all time plots of one view share: the time origin, the zoom, the plots themselves.
class PlotGroup {
  constructor(key) { this.key = key; this.t0 = null; this.zoom = null; this.plots = new Set(); }
  window() {  // the common time window of the group's plots (s since t0), or the zoom
    if (this.zoom) return this.zoom;
    let lo = Infinity, hi = -Infinity;
    for (const p of this.plots) {
      const [a, b] = p.extent();
      if (a < lo) lo = a;
      if (b > hi) hi = b;
    }
    return isFinite(lo) && isFinite(hi) ? [lo, hi > lo ? hi : lo + 1] : [0, 1];
  }
  setZoom(z) { this.zoom = z; for (const p of this.plots) p.redraw(); }
  clear() { for (const p of [...this.plots]) p.remove(); this.zoom = null; this.t0 = null; }
}

// the envelope colour of a channel: its line colour, faint
function faint(color) {
  const n = parseInt(color.slice(1), 16);
  return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, 0.18)`;
}

// an axis as wide as its longest tick label ("600.004 kPa" needs more room than "0 N")
function axisWidth(u, values) {
  return values && values.length ? Math.max(50, 18 + 7 * Math.max(...values.map((v) => String(v).length))) : 50;
}

class StreamPlot {
  constructor(group, container, name, channels, units, width) {
    this.group = group;
    this.name = name;
    this.channels = channels;
    this.units = units;
    const k = channels.length;
    this.cols = Array.from({length: 1 + 3 * k}, () => new Float64Array(2 * CAP));  // t, values, min, max
    this.end = 0;
    this.gapAt = -1;           // where the newest gap row is (a view from there on needs nulls)
    this.dirty = false;
    this.decimated = 0;        // samples received / samples kept (> 1: the envelope is drawn)
    this.spacings = [];
    this.lastT = null;
    this.box = document.createElement("div");
    this.box.className = "plot";
    this.box.dataset.stream = name;
    this.note = document.createElement("div");
    this.note.className = "muted note";
    container.appendChild(this.box);
    this.box.appendChild(this.note);
    this.plot = new uPlot(this.options(width), this.view(), this.box);
    this.plot.over.addEventListener("dblclick", () => group.setZoom(null));
    group.plots.add(this);
  }
  options(width) {
    const unitList = [...new Set(this.units)];
    const scales = {x: {time: false, auto: true, range: () => this.group.window()}};
    unitList.forEach((u) => { scales[u] = {auto: true}; });
    const axes = [{label: "time since the run started [s]", values: (u, splits) => splits.map((v) => num(v, 6))}];
    this.ticks = {};  // what each value axis shows, by unit (box.dataset.ticks: the tests read it)
    unitList.slice(0, 2).forEach((u, k) => axes.push({scale: u, label: u, side: k === 0 ? 3 : 1, size: axisWidth,
                                                     splits: (p, i, lo, hi) => niceSplits(lo, hi),
                                                     values: (p, splits) => this.shown(u, siTicks(u)(p, splits))}));
    return {
      title: this.name, width, height: 200, scales, axes,
      cursor: {sync: {key: this.group.key}, drag: {x: true, y: false, setScale: false}},
      series: [{label: "time [s]", value: (u, v) => v == null ? "" : num(v, 6) + " s"},
        ...this.channels.map((c, i) => ({
          label: `${c} [${this.units[i]}]`, scale: this.units[i], stroke: COLORS[i % COLORS.length], width: 1,
          spanGaps: false, value: (u, v, s, idx) => si(idx == null ? this.last(i) : v, this.units[i], 7),
        }))],
      hooks: {
        setSelect: [(u) => {
          if (u.select.width > 4) {
            const a = u.posToVal(u.select.left, "x"), b = u.posToVal(u.select.left + u.select.width, "x");
            u.setSelect({left: 0, width: 0, top: 0, height: 0}, false);
            this.group.setZoom([a, b]);
          }
        }],
        draw: [(u) => this.drawEnvelope(u)],
      },
    };
  }
  shown(unit, labels) {
    this.ticks[unit] = labels;
    this.box.dataset.ticks = JSON.stringify(this.ticks);
    return labels;
  }
  // t (s, absolute), data[channel][k], lo/hi like data or undefined (not decimated)
  push(t, data, lo, hi, n) {
    if (this.group.t0 == null && t.length) this.group.t0 = t[0];
    if (n && t.length && n > t.length) this.decimated = Math.max(this.decimated, n / t.length);
    const typical = this.typical();  // once per block: the median of the recent sample spacings
    for (let j = 0; j < t.length; j++) {
      if (this.lastT != null && t[j] != null) {
        const d = t[j] - this.lastT;
        if (d > MIN_GAP_S && d > GAP_FACTOR * typical) this.row(null, null, null, null);
        else if (d > 0 && j < 4) { this.spacings.push(d); if (this.spacings.length > 32) this.spacings.shift(); }
      }
      this.row(t[j], data, lo, hi, j);
      if (t[j] != null) this.lastT = t[j];
    }
    S.points += t.length;
    this.dirty = true;
  }
  typical() {
    if (!this.spacings.length) return Infinity;
    const s = this.spacings.slice().sort((a, b) => a - b);
    return s[s.length >> 1];
  }
  row(t, data, lo, hi, j) {  // one sample (t null: a gap)
    if (this.end === 2 * CAP) {
      for (const c of this.cols) c.copyWithin(0, CAP, 2 * CAP);
      this.end = CAP;
      this.gapAt -= CAP;
    }
    const k = this.channels.length;
    this.cols[0][this.end] = (t == null ? (this.lastT ?? 0) : t) - (this.group.t0 || 0);  // s since t0
    if (t == null) this.gapAt = this.end;
    for (let i = 0; i < k; i++) {
      const v = t == null || !data[i] ? null : data[i][j];
      this.cols[1 + i][this.end] = v == null ? NaN : v;
      const a = lo && lo[i] && t != null ? lo[i][j] : v, b = hi && hi[i] && t != null ? hi[i][j] : v;
      this.cols[1 + k + i][this.end] = a == null ? NaN : a;
      this.cols[1 + 2 * k + i][this.end] = b == null ? NaN : b;
    }
    this.end++;
  }
  extent() {
    const a = Math.max(0, this.end - CAP);
    if (this.end <= a) return [Infinity, -Infinity];
    return [this.cols[0][a], this.cols[0][this.end - 1]];
  }
  last(i) {
    for (let j = this.end - 1; j >= Math.max(0, this.end - CAP); j--) {
      const v = this.cols[1 + i][j];
      if (!isNaN(v)) return v;
    }
    return null;
  }
  view() {  // uPlot's data: x in s since t0; with a gap or a lost value in view, NaN as null (a break)
    const a = Math.max(0, this.end - CAP), k = this.channels.length;
    const ys = this.cols.slice(1, 1 + k).map((c) => c.subarray(a, this.end));
    const holes = this.gapAt >= a || ys.some((y) => y.some(isNaN));
    return [this.cols[0].subarray(a, this.end),
      ...(holes ? ys.map((y) => Array.from(y, (v) => isNaN(v) ? null : v)) : ys)];
  }
  drawEnvelope(u) {
    if (!(this.decimated > 1)) return;
    const k = this.channels.length, a = Math.max(0, this.end - CAP), t = this.cols[0];
    const g = u.ctx;
    g.save();
    g.beginPath();
    g.rect(u.bbox.left, u.bbox.top, u.bbox.width, u.bbox.height);
    g.clip();
    const [xa, xb] = affine(u, "x"), x0 = u.bbox.left - 1, x1 = u.bbox.left + u.bbox.width + 1;
    for (let i = 0; i < k; i++) {
      const lo = this.cols[1 + k + i], hi = this.cols[1 + 2 * k + i], [ya, yb] = affine(u, this.units[i]);
      g.fillStyle = faint(COLORS[i % COLORS.length]);
      // one lowest and one highest value per pixel column: a band of a few thousand samples has at most the
      // plot's width in columns (drawn point by point it cost ~80 ms a redraw without a GPU: a live page took
      // a whole core, and its clicks waited seconds on a busy machine)
      const xs = [], los = [], his = [];
      const flush = () => {
        if (xs.length === 1 && his[0] > los[0]) {  // a stretch between gaps within one column: a 1 px bar
          const top = ya * his[0] + yb, bottom = ya * los[0] + yb;
          g.fillRect(xs[0] - 0.5, Math.min(top, bottom), 1, Math.abs(bottom - top));
        } else if (xs.length > 1) {
          g.beginPath();
          g.moveTo(xs[0], ya * his[0] + yb);
          for (let m = 1; m < xs.length; m++) g.lineTo(xs[m], ya * his[m] + yb);
          for (let m = xs.length - 1; m >= 0; m--) g.lineTo(xs[m], ya * los[m] + yb);
          g.closePath();
          g.fill();
        }
        xs.length = los.length = his.length = 0;
      };
      for (let j = a; j < this.end; j++) {
        const l = lo[j], h = hi[j];
        if (isNaN(l) || isNaN(h)) { flush(); continue; }
        const x = Math.floor(xa * t[j] + xb) + 0.5, m = xs.length - 1;  // the centre of its pixel column
        if (x < x0 || x > x1) continue;  // outside the plot (a common time window starting earlier)
        if (m >= 0 && xs[m] === x) {
          if (l < los[m]) los[m] = l;
          if (h > his[m]) his[m] = h;
        } else { xs.push(x); los.push(l); his.push(h); }
      }
      flush();
    }
    g.restore();
  }
  redraw() {
    this.plot.setData(this.view());
    const ratio = this.decimated;
    this.note.textContent = ratio > 1 ? `decimated for display: about 1 of ${num(ratio, 3)} samples drawn; ` +
      "the shaded band is the min–max of all samples" : "";
    this.box.dataset.decimated = ratio > 1 ? "1" : "0";
    S.redraws++;
  }
  draw() { if (this.dirty) { this.dirty = false; this.redraw(); } }
  resize(width) { this.plot.setSize({width, height: 200}); }
  remove() { this.plot.destroy(); this.box.remove(); this.group.plots.delete(this); }
}

// A linear scale of plot ``u`` as [a, b]: a value v is at a * v + b on the canvas (what u.valToPos(v, scale,
// true) gives, without a call per point).
function affine(u, scale) {
  const sc = u.scales[scale], v0 = sc.min, v1 = sc.max;
  if (!(v1 > v0)) return [0, u.valToPos(v0, scale, true)];
  const p0 = u.valToPos(v0, scale, true), p1 = u.valToPos(v1, scale, true);
  const a = (p1 - p0) / (v1 - v0);
  return [a, p0 - a * v0];
}

// A stored series (GET /api/sessions/{id}/series) into a plot: mean as the line, min/max as the envelope.
function fillFromSeries(plot, s) {
  if (s.per_point > 1) plot.decimated = Math.max(plot.decimated, s.per_point);
  plot.push(s.t, s.mean, s.per_point > 1 ? s.min : null, s.per_point > 1 ? s.max : null, 0);
  plot.spacings = [];
}

// The press's setpoint correction (docs/contracts.md, events on <rig>.plan): every `setpoint_reached` /
// `setpoint_not_reached` carries the residual q_actual - q_desired after the correction; plotted per step
// (steps numbered 1, 2, ... in the session's order, the same after a reload) with the tolerance band.
class CorrectionPlot {
  constructor(box, stream, unit, width) {
    this.stream = stream;
    this.k = 0;
    this.cols = [new Float64Array(CAP), new Float64Array(CAP), new Float64Array(CAP), new Float64Array(CAP)];
    this.n = 0;
    this.tolerance = null;
    this.dirty = false;
    this.unit = unit || "N";
    this.box = box;
    box.hidden = false;
    box.innerHTML = "";
    this.plot = new uPlot({
      title: `setpoint correction: error q_actual − q_desired per step (${stream})`, width, height: 180,
      scales: {x: {time: false}, err: {auto: true}},
      axes: [{label: "step"}, {scale: "err", label: this.unit, size: 90, splits: (p, i, lo, hi) => niceSplits(lo, hi),
               values: siTicks(this.unit)}],
      series: [{label: "step"},
        {label: `error [${this.unit}]`, scale: "err", stroke: COLORS[1], width: 1, points: {show: true, size: 5},
         value: (u, v) => si(v, this.unit, 4)},
        {label: `+tolerance [${this.unit}]`, scale: "err", stroke: "#999", width: 1, dash: [4, 4], points: {show: false},
         value: (u, v) => si(v, this.unit, 4)},
        {label: `−tolerance [${this.unit}]`, scale: "err", stroke: "#999", width: 1, dash: [4, 4], points: {show: false},
         value: (u, v) => si(v, this.unit, 4)}],
    }, this.view(), box);
  }
  push(body) {
    if (this.n === CAP) {
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
  view() { return this.cols.map((c) => Array.from(c.subarray(0, this.n), (v) => isNaN(v) ? null : v)); }
  draw() {
    if (!this.dirty) return;
    this.dirty = false;
    this.plot.setData(this.view());
    this.box.dataset.points = String(this.n);
  }
  resize(width) { this.plot.setSize({width, height: 180}); }
  remove() { this.plot.destroy(); this.box.hidden = true; this.box.dataset.points = "0"; }
}
