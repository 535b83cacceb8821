// The page's start: the admin key (sessionStorage, sent as a header), the info line, and the live
// event stream read with fetch (so the key never goes into a URL), dispatched to the panels.
(function () {
  "use strict";
  const R = (window.RDX = window.RDX || {});
  const KEY = "radixlm-dashboard-key";
  const $ = (id) => document.getElementById(id);

  R.headers = function (extra) {
    const h = Object.assign({}, extra || {});
    const key = sessionStorage.getItem(KEY);
    if (key) h.Authorization = "Bearer " + key;
    return h;
  };

  R.apiError = async function (resp) {
    let message = `${resp.status} ${resp.statusText}`;
    try { message = (await resp.json()).error.message; } catch (e) { /* not an OpenAI error body */ }
    const err = new Error(message);
    err.status = resp.status;
    return err;
  };

  // Server-sent events over fetch: calls onEvent with each JSON event until [DONE] or the end.
  R.readEvents = async function (resp, onEvent) {
    const reader = resp.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = frame.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
        if (data === "[DONE]") return;
        if (data) onEvent(JSON.parse(data));
      }
    }
  };

  function status(text, cls) {
    $("status").textContent = text;
    $("status").className = "status " + (cls || "");
  }

  async function getJSON(path) {
    const resp = await fetch(path, { headers: R.headers() });
    if (!resp.ok) throw await R.apiError(resp);
    return resp.json();
  }

  function askKey(message) {
    $("key-message").textContent = message;
    $("key-form").hidden = false;
    status("locked", "error");
  }

  function showInfo(info) {
    $("model").textContent = info.model + (info.random_weights ? " (random weights: answers are noise)" : "");
    const note = $("access-note");
    if (info.auth === "none") {
      note.textContent = `No API key is configured: anyone who can reach ${info.host}:${info.port} can read ` +
        "this dashboard, every prompt in the cache included. The server binds only to " + info.host +
        (info.loopback ? " (this machine)." : "; start it with --api-key and --admin-api-key to restrict it.");
      note.hidden = false;
    } else if (info.tenants) {
      note.textContent = "Several API keys: each tenant's namespace is labelled separately below.";
      note.hidden = false;
    }
  }

  function onEvent(ev) {
    if (ev.type === "series") R.charts.reset(ev.samples);
    else if (ev.type === "samples") R.charts.add(ev.samples);
    else if (ev.type === "inspect") {
      R.tree.render(ev.tree);
      R.tree.evictions(ev.evictions);
      R.tables.requests(ev.requests);
      R.tables.grammars(ev.grammars);
      document.body.dataset.filled = "yes";  // the stream's first events fill every panel
    } else if (ev.type === "bye") status(ev.reason, "error");
    else if (ev.error) status("error: " + ev.error.message, "error");
  }

  async function connect() {
    try {
      const resp = await fetch("/dashboard/events", { headers: R.headers() });
      if (!resp.ok) throw await R.apiError(resp);
      status("live", "live");
      await R.readEvents(resp, onEvent);
      status("disconnected: reconnecting…", "error");
    } catch (e) {
      if (e.status === 401 || e.status === 403) { askKey(e.message); return; }
      status("disconnected: " + e.message, "error");
    }
    setTimeout(connect, 3000);
  }

  async function start() {
    R.charts.init($("charts"));
    R.playground.init();
    $("key-form").addEventListener("submit", (ev) => {
      ev.preventDefault();
      sessionStorage.setItem(KEY, $("key-input").value.trim());
      $("key-form").hidden = true;
      start2();
    });
    start2();
  }

  async function start2() {
    try {
      showInfo(await getJSON("/dashboard/api/info"));
    } catch (e) {
      if (e.status === 401 || e.status === 403) askKey(e.message);
      else status("error: " + e.message, "error");
      return;
    }
    connect();
  }

  document.addEventListener("DOMContentLoaded", start);
})();
