// The recent-requests and grammar-cache tables; every cell is written with textContent.
(function () {
  "use strict";
  const KEEP = 100;
  let seen = 0;
  const ms = (v) => (v === null || v === undefined ? "–" : (v * 1000).toFixed(v < 0.01 ? 1 : 0) + " ms");
  const dash = (v) => (v === null || v === undefined ? "–" : String(v));

  function row(cells, title) {
    const tr = document.createElement("tr");
    for (const [text, cls] of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      if (cls) td.className = cls;
      tr.appendChild(td);
    }
    if (title) tr.title = title;
    return tr;
  }

  // the grammar: "cached" when it was ready at submission, else its compile time
  function constraintCells(c) {
    if (!c) return [["–"], ["–"]];
    return [[c.kind], [c.cached ? "cached" : ms(c.compile_s)]];
  }

  function requests(list) {
    const body = document.querySelector("#requests-table tbody");
    for (const r of list) {
      if (r.seq <= seen) continue;
      seen = r.seq;
      const when = new Date(r.finished_at * 1000).toLocaleTimeString();
      const tr = row([[when], [r.label], [dash(r.prompt_tokens)], [dash(r.cached_tokens)],
        [dash(r.completion_tokens)], ...constraintCells(r.constraint), [dash(r.forced_tokens)],
        [dash(r.closed_tokens)], [ms(r.ttft_s)], [r.decode_tps ? r.decode_tps.toFixed(1) : "–"],
        [r.error ? "error" : dash(r.finish_reason)]],
      (r.error || r.rid) + (r.constraint ? ` · waited ${ms(r.constraint.wait_s)} for its grammar` : ""));
      tr.dataset.seq = r.seq;
      body.insertBefore(tr, body.firstChild);
    }
    while (body.children.length > KEEP) body.removeChild(body.lastChild);
  }

  function grammars(list) {
    const body = document.querySelector("#grammars-table tbody");
    while (body.firstChild) body.removeChild(body.firstChild);
    for (const g of list) {
      const size = g.bytes ? (g.bytes / 1024).toFixed(0) + " KiB" : "–";
      body.appendChild(row([[g.kind], [g.spec, "spec"], [g.state], [String(g.hits)], [ms(g.compile_s)], [size]],
        g.error || g.spec));
    }
  }

  window.RDX = window.RDX || {};
  window.RDX.tables = { requests, grammars };
})();
