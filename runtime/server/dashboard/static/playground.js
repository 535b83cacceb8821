// The playground: one request to /dashboard/api/playground, its tokens coloured by origin as they
// stream in, the parsed JSON beside them. Token text is written with textContent only.
(function () {
  "use strict";
  const ORIGINS = [["cache", "read from the cache"], ["prefill", "computed in prefill"],
    ["forced", "forced by the grammar (a draft the model verified)"],
    ["drafted", "drafted from the prompt or the cache (verified)"], ["closed", "closed by the budget"],
    ["masked", "sampled under a mask"], ["free", "sampled freely"]];
  const EXAMPLES = {
    json_schema: JSON.stringify({ type: "object", properties: { name: { type: "string", maxLength: 24 },
      age: { type: "integer", minimum: 0, maximum: 120 }, city: { enum: ["Paris", "Lima", "Oslo"] } },
    required: ["name", "age", "city"], additionalProperties: false }, null, 2),
    regex: "(yes|no), because [a-z ]{5,40}\\.",
    tools: JSON.stringify([{ type: "function", function: { name: "get_weather", description: "Weather in a city",
      parameters: { type: "object", properties: { city: { type: "string" }, unit: { enum: ["C", "F"] } },
        required: ["city", "unit"] } } }], null, 2),
    none: "",
  };
  let answer = [];
  const $ = (id) => document.getElementById(id);

  function span(text, origin) {
    const s = document.createElement("span");
    s.className = "tok origin-" + origin;
    s.textContent = text;
    s.title = origin;
    return s;
  }

  function legend() {
    const box = $("pg-legend");
    for (const [origin, words] of ORIGINS) box.appendChild(span(words, origin));
  }

  function showPrompt(tokens, cached) {
    const box = $("pg-prompt-tokens");
    while (box.firstChild) box.removeChild(box.firstChild);
    tokens.forEach((t, i) => box.appendChild(span(t, i < cached ? "cache" : "prefill")));
  }

  function showTokens(ev) {
    answer = answer.slice(0, ev.offset).concat(ev.tokens);
    const box = $("pg-answer");
    while (box.children.length > ev.offset) box.removeChild(box.lastChild);
    for (const t of ev.tokens) box.appendChild(span(t.text, t.origin));
  }

  function showDone(ev) {
    $("pg-status").textContent = `finished: ${ev.finish_reason} · ${ev.completion_tokens} tokens · ` +
      `${ev.cached_tokens} prompt tokens from the cache · ${ev.forced_tokens} forced · ${ev.closed_tokens} closed` +
      (ev.notes && ev.notes.length ? " · " + ev.notes.join("; ") : "");
    $("pg-json").textContent = ev.json !== null ? JSON.stringify(ev.json, null, 2) : (ev.json_error || "(not a JSON answer)");
  }

  function body() {
    const out = { max_new_tokens: Number($("pg-max-tokens").value || 64) };
    const text = $("pg-prompt").value;
    if ($("pg-mode").value === "chat") out.messages = [{ role: "user", content: text }];
    else out.prompt = text;
    const kind = $("pg-constraint").value;
    const spec = $("pg-constraint-text").value;
    if (kind === "json_schema" || kind === "tools") out[kind] = JSON.parse(spec);
    else if (kind === "regex") out.regex = spec;
    for (const [id, key] of [["pg-temperature", "temperature"], ["pg-top-p", "top_p"], ["pg-seed", "seed"]]) {
      const v = $(id).value;
      if (v !== "") out[key] = Number(v);
    }
    return out;
  }

  async function run(ev) {
    ev.preventDefault();
    const R = window.RDX;
    answer = [];
    for (const id of ["pg-answer", "pg-prompt-tokens"]) while ($(id).firstChild) $(id).removeChild($(id).firstChild);
    $("pg-json").textContent = "";
    let payload;
    try { payload = body(); } catch (e) { $("pg-status").textContent = "the constraint is not valid JSON: " + e.message; return; }
    $("pg-status").textContent = "running…";
    $("pg-run").disabled = true;
    try {
      const resp = await fetch("/dashboard/api/playground", { method: "POST",
        headers: R.headers({ "Content-Type": "application/json" }), body: JSON.stringify(payload) });
      if (!resp.ok) { $("pg-status").textContent = "error: " + (await R.apiError(resp)).message; return; }
      await R.readEvents(resp, (e) => {
        if (e.type === "prompt") showPrompt(e.tokens, e.cached);
        else if (e.type === "tokens") showTokens(e);
        else if (e.type === "done") showDone(e);
        else if (e.error) $("pg-status").textContent = "error: " + e.error.message;
      });
    } catch (e) {
      $("pg-status").textContent = "error: " + e.message;
    } finally {
      $("pg-run").disabled = false;
    }
  }

  function init() {
    legend();
    $("pg-constraint-text").value = EXAMPLES.json_schema;
    $("pg-constraint").addEventListener("change", () => { $("pg-constraint-text").value = EXAMPLES[$("pg-constraint").value]; });
    $("pg-form").addEventListener("submit", run);
  }

  window.RDX = window.RDX || {};
  window.RDX.playground = { init };
})();
