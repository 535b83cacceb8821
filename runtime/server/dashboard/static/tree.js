// The radix tree as an icicle (SVG): one band per namespace, x = token depth, height = share of
// the cached tokens below the parent. Node text goes into <title> and the tooltip as textContent.
(function () {
  "use strict";
  const SVG = "http://www.w3.org/2000/svg";
  const BAND_MIN = 36, HEIGHT = 300, LABEL_H = 14;
  let evicted = 0, seenEviction = 0;

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG, name);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (parent) parent.appendChild(node);
    return node;
  }

  function describe(n) {
    const age = n.age_s === null ? "–" : n.age_s < 60 ? n.age_s.toFixed(1) + " s" : (n.age_s / 60).toFixed(1) + " min";
    return `${n.tokens} tokens (${n.subtree_tokens} below) · ${n.hits} hits · last use ${age} ago · ` +
      `${n.locks} locks · ${n.children} children` + (n.tokens > n.token_ids.length ? " · text: first tokens" : "");
  }

  function colour(hits) {
    const light = Math.max(30, 78 - Math.log2(1 + hits) * 7);
    return `hsl(199, 70%, ${light}%)`;
  }

  function layout(ns, y0, y1, scale, svg, tip) {
    const kids = new Map();
    for (const n of ns.nodes) {
      const key = n.parent === null ? "" : n.parent;
      if (!kids.has(key)) kids.set(key, []);
      kids.get(key).push(n);
    }
    const place = (list, total, top, bottom) => {
      let at = top;
      for (const n of list) {
        const h = total > 0 ? ((bottom - top) * n.subtree_tokens) / total : 0;
        drawNode(n, at, h, scale, svg, tip);
        place(kids.get(n.id) || [], n.subtree_tokens - n.tokens, at, at + h);
        at += h;
      }
    };
    place(kids.get("") || [], ns.tokens, y0, y1);
  }

  function drawNode(n, y, h, scale, svg, tip) {
    const x = n.depth * scale, w = Math.max(n.tokens * scale, 2);
    const rect = el("rect", { class: "tree-node" + (n.locks > 0 ? " locked" : ""), x, y, width: w,
      height: Math.max(h - 0.5, 0.5), fill: colour(n.hits), "data-id": n.id, "data-tokens": n.tokens,
      "data-children": n.children, "data-hits": n.hits }, svg);
    el("title", {}, rect).textContent = describe(n) + "\n" + n.text;
    rect.addEventListener("mousemove", (ev) => {
      tip.hidden = false;
      tip.textContent = describe(n) + "\n\n" + n.text;
      tip.style.left = Math.min(ev.clientX + 12, window.innerWidth - 430) + "px";
      tip.style.top = ev.clientY + 12 + "px";
    });
    rect.addEventListener("mouseleave", () => { tip.hidden = true; });
    if (w > 40 && h > 11) {
      const label = el("text", { class: "tree-label", x: x + 3, y: y + Math.min(h / 2 + 3, 12) }, svg);
      label.textContent = n.text.replace(/\s+/g, " ").slice(0, Math.floor(w / 6));
    }
  }

  function render(tree) {
    const view = document.getElementById("tree-view");
    const tip = document.getElementById("tree-tip");
    const summary = document.getElementById("tree-summary");
    while (view.firstChild) view.removeChild(view.firstChild);
    if (!tree) { summary.textContent = "(the radix cache is disabled)"; return; }
    const spaces = tree.namespaces;
    summary.textContent = `${tree.nodes_shown} of ${tree.nodes_total} nodes shown` +
      (tree.truncated ? " (large tree: walk cut short)" : "") + ` · ${spaces.length} namespace(s)`;
    let reach = 1, total = 0;
    for (const ns of spaces) {
      total += ns.tokens;
      for (const n of ns.nodes) reach = Math.max(reach, n.depth + n.tokens);
    }
    const height = Math.max(HEIGHT, spaces.length * (BAND_MIN + LABEL_H));
    const W = Math.max(view.clientWidth, 300);
    const svg = el("svg", { viewBox: `0 0 ${W} ${height}`, width: W, height }, view);
    const scale = W / reach;
    let free = height - spaces.length * (BAND_MIN + LABEL_H), y = 0;
    for (const ns of spaces) {
      const band = BAND_MIN + (total > 0 ? (free * ns.tokens) / total : 0);
      const label = el("text", { class: "ns-label", x: 2, y: y + 11, "data-tenant": ns.tenant || "" }, svg);
      label.textContent = `${ns.label} · ${ns.tokens} tokens`;
      const g = el("g", { class: "namespace", "data-label": ns.label }, svg);
      layout(ns, y + LABEL_H, y + LABEL_H + band, scale, g, tip);
      y += LABEL_H + band;
    }
    if (!spaces.length) {
      el("text", { class: "ns-label", x: 8, y: 20 }, svg).textContent = "the cache is empty";
    }
  }

  function evictions(list) {
    const feed = document.getElementById("evictions");
    for (const old of feed.querySelectorAll(".fresh")) old.classList.remove("fresh");
    for (const e of list) {
      if (e.seq <= seenEviction) continue;  // a reconnect's whole snapshot repeats what was shown
      seenEviction = e.seq;
      evicted += e.tokens;
      const li = document.createElement("li");
      li.className = "fresh";
      li.textContent = `−${e.tokens} tokens · ${e.label} · depth ${e.depth} · ${e.hits} hits · ` +
        e.text.replace(/\s+/g, " ").slice(0, 120);
      feed.insertBefore(li, feed.firstChild);
    }
    while (feed.children.length > 60) feed.removeChild(feed.lastChild);
    document.getElementById("eviction-count").textContent = `(${evicted} tokens in the evictions received)`;
  }

  window.RDX = window.RDX || {};
  window.RDX.tree = { render, evictions };
})();
