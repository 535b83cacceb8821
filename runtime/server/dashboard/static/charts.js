// Time-series charts drawn by hand in SVG: one chart per group of figures, the last WINDOW_S seconds.
(function () {
  "use strict";
  const SVG = "http://www.w3.org/2000/svg";
  const WINDOW_S = 300, MIN_WINDOW_S = 60;  // the window grows with the data, up to five minutes
  const W = 300, H = 120, PAD_L = 34, PAD_B = 14, PAD_T = 6;
  const secs = (v) => (v < 1 ? (v * 1000).toFixed(v < 0.01 ? 1 : 0) + " ms" : v.toFixed(2) + " s");
  const pct = (v) => (v * 100).toFixed(0) + "%";
  const num = (v) => (v >= 100 ? v.toFixed(0) : v.toFixed(1));
  const DEFS = [
    { id: "throughput", title: "Throughput (tokens/s)", fmt: num,
      series: [["prefill_tps", "prefill"], ["decode_tps", "decode"]] },
    { id: "requests", title: "Requests", fmt: (v) => v.toFixed(0),
      series: [["running", "running"], ["queued", "queued"]] },
    { id: "ttft", title: "Time to first token", fmt: secs,
      series: [["ttft_p50", "p50"], ["ttft_p90", "p90"], ["ttft_p99", "p99"]] },
    { id: "itl", title: "Inter-token latency", fmt: secs,
      series: [["itl_p50", "p50"], ["itl_p90", "p90"], ["itl_p99", "p99"]] },
    { id: "cache", title: "KV pool use / cache hit rate", fmt: pct, max: 1,
      series: [["kv_usage", "KV use"], ["hit_rate", "hit rate"]] },
    { id: "spec", title: "Draft tokens kept per verify step", fmt: num,
      series: [["spec_kept", "kept / step"]] },
  ];
  let samples = [];
  const charts = {};

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (parent) parent.appendChild(node);
    return node;
  }

  function build(container) {
    for (const def of DEFS) {
      const box = document.createElement("div");
      box.className = "chart";
      box.id = "chart-" + def.id;
      const title = document.createElement("h3");
      title.textContent = def.title;
      box.appendChild(title);
      const svg = el("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none" }, box);
      const legend = document.createElement("div");
      legend.className = "legend";
      box.appendChild(legend);
      container.appendChild(box);
      charts[def.id] = { def, svg, legend };
    }
  }

  function niceMax(v) {
    if (!(v > 0)) return 1;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
    return 10 * p;
  }

  function draw(chart) {
    const { def, svg, legend } = chart;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    while (legend.firstChild) legend.removeChild(legend.firstChild);
    const tEnd = samples.length ? samples[samples.length - 1].t : Date.now() / 1000;
    const span = samples.length ? tEnd - samples[0].t : 0;
    const win = Math.min(WINDOW_S, Math.max(MIN_WINDOW_S, Math.ceil(span / 30) * 30));
    const shown = samples.filter((s) => s.t >= tEnd - win);
    let top = def.max || 0;
    if (!def.max) for (const s of shown) for (const [key] of def.series) if (s[key] > top) top = s[key];
    top = def.max || niceMax(top);
    const x = (t) => PAD_L + ((t - (tEnd - win)) / win) * (W - PAD_L - 2);
    const y = (v) => H - PAD_B - (Math.min(v, top) / top) * (H - PAD_B - PAD_T);
    for (const frac of [0, 0.5, 1]) {
      el("line", { class: "grid", x1: PAD_L, x2: W, y1: y(top * frac), y2: y(top * frac) }, svg);
      el("text", { class: "axis", x: 2, y: y(top * frac) + 3 }, svg).textContent = def.fmt(top * frac);
    }
    el("text", { class: "axis", x: PAD_L, y: H - 2 }, svg).textContent = win >= 120 ? `-${win / 60} min` : `-${win} s`;
    el("text", { class: "axis", x: W - 22, y: H - 2 }, svg).textContent = "now";
    def.series.forEach(([key, label], i) => {
      let d = "", points = 0, pen = "M", last = null;
      for (const s of shown) {
        const v = s[key];
        if (v === null || v === undefined) { pen = "M"; continue; }
        d += `${pen}${x(s.t).toFixed(1)},${y(v).toFixed(1)} `;
        pen = "L";
        points += 1;
        last = v;
      }
      el("path", { class: `series s${i}`, d: d || "M0,0", "data-key": key, "data-points": points }, svg);
      const item = document.createElement("span");
      item.className = `s${i}`;
      item.textContent = `${label}: ${last === null ? "–" : def.fmt(last)}`;
      legend.appendChild(item);
    });
  }

  function redraw() { for (const chart of Object.values(charts)) draw(chart); }

  window.RDX = window.RDX || {};
  window.RDX.charts = {
    init(container) { build(container); redraw(); },
    reset(list) { samples = list.slice(); redraw(); },
    add(list) {
      samples = samples.concat(list);
      const cut = samples.length - 2 * WINDOW_S;
      if (cut > 0) samples = samples.slice(cut);
      redraw();
    },
  };
})();
