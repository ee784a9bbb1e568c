// Arena CSV evaluations page: upload a suite, stream results over SSE (fetch + ReadableStream), show and download them.
// Safety rule: everything that comes from the agent, the judge or the CSV is rendered with textContent, never as HTML.
// The page runs under a strict CSP (script-src/style-src 'self'): no inline script, no inline style attribute.
// Authentication: the page is opened once as /evaluations/?token=<operator token>; the server answers with an
// HttpOnly SameSite=Strict cookie, which every same-origin request below carries. The token is then removed from
// the address bar (and so from the history and from bookmarks).
"use strict";

(function () {
  if (new URLSearchParams(window.location.search).has("token")) {
    window.history.replaceState(null, "", window.location.pathname + window.location.hash);
  }
  const $ = (id) => document.getElementById(id);
  const state = { file: null, cases: [], summary: null, error: null, running: false, total: 0, done: 0,
                  agentUrl: "", fileName: "", startedAt: null, starts: new Map(), results: new Map() };
  // How the cases table is filtered and sorted (the rows stay in the DOM; filtered-out rows are hidden).
  const view = { outcome: "all", text: "", sort: "case" };
  const collator = new Intl.Collator(undefined, { numeric: true, sensitivity: "base" });

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function setStatus(text) { $("status").textContent = text; }

  function formatScore(value) {
    return value === null || value === undefined ? "n/a" : value.toFixed(2);
  }

  // Rates as `arena eval-csv` prints them: three decimals, the interval in brackets.
  function formatRate(value) {
    return value === null || value === undefined ? "n/a" : value.toFixed(3);
  }

  function formatInterval(low, high) {
    if (low === null || low === undefined || high === null || high === undefined) return null;
    return "95% CI [" + formatRate(low) + ", " + formatRate(high) + "]";
  }

  function scoreClass(value) {
    if (value === null || value === undefined) return "score score-none";
    if (value >= 0.7) return "score score-good";
    if (value >= 0.4) return "score score-mid";
    return "score score-bad";
  }

  function pretty(value) {
    try { return JSON.stringify(value, null, 2); } catch (e) { return String(value); }
  }

  // -- file selection (drag and drop or picker) --------------------------------------------------------------------

  function chooseFile(file) {
    if (!file) return;
    state.file = file;
    $("file-name").textContent = file.name + " (" + file.size + " bytes)";
    $("run-button").disabled = state.running;
    showProblems([]);
  }

  function wireDropZone() {
    const zone = $("drop-zone");
    ["dragenter", "dragover"].forEach((type) => zone.addEventListener(type, (event) => {
      event.preventDefault();
      zone.classList.add("dragover");
    }));
    ["dragleave", "dragend"].forEach((type) => zone.addEventListener(type, () => zone.classList.remove("dragover")));
    zone.addEventListener("drop", (event) => {
      event.preventDefault();
      zone.classList.remove("dragover");
      const files = event.dataTransfer && event.dataTransfer.files;
      if (files && files.length) chooseFile(files[0]);
    });
    zone.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") { event.preventDefault(); $("file-input").click(); }
    });
    $("file-input").addEventListener("change", (event) => chooseFile(event.target.files[0]));
  }

  // -- problems and summary ----------------------------------------------------------------------------------------

  function showProblems(problems) {
    const list = $("problems");
    list.replaceChildren();
    problems.forEach((p) => {
      const where = [p.row ? "row " + p.row : "", p.column ? "column " + p.column : ""].filter(Boolean).join(", ");
      list.appendChild(el("li", "problem", (where ? where + ": " : "") + p.message));
    });
    list.hidden = problems.length === 0;
  }

  function card(label, value, className, interval) {
    const box = el("div", "card");
    box.appendChild(el("div", "k", label));
    const v = el("div", "v " + (className || ""), value);
    box.appendChild(v);
    if (interval) box.appendChild(el("div", "ci", interval));
    return box;
  }

  function renderSummary(summary) {
    const box = $("summary");
    box.replaceChildren();
    const rateCard = card("pass rate", formatRate(summary.pass_rate),
      summary.pass_rate === null ? "" : scoreClass(summary.pass_rate),
      formatInterval(summary.pass_rate_ci_low, summary.pass_rate_ci_high));
    rateCard.id = "pass-rate-card";
    rateCard.title = "passed / total (errored and unscored cases count as not passed); Wilson 95% interval";
    box.appendChild(rateCard);
    box.appendChild(card("passed", summary.passed));
    box.appendChild(card("failed", summary.failed));
    box.appendChild(card("errored", summary.errored));
    box.appendChild(card("unscored", summary.unscored));
    box.appendChild(card("tool selection", formatScore(summary.mean_tool_selection)));
    box.appendChild(card("arguments", formatScore(summary.mean_argument_match)));
    box.appendChild(card("faithfulness", formatScore(summary.mean_faithfulness)));
    box.appendChild(card("judge", summary.judge ? summary.judge.name : "?"));
    box.appendChild(card("wall time", summary.wall_time_s + " s"));
    box.hidden = false;
    box.dataset.done = "true";
  }

  function updateProgress() {
    const pct = state.total ? Math.round((100 * state.done) / state.total) : 0;
    $("progress-bar").style.width = pct + "%";
    $("progress").setAttribute("aria-valuemax", String(state.total));
    $("progress").setAttribute("aria-valuenow", String(state.done));
    $("progress-text").textContent = state.done + " / " + state.total + " cases";
  }

  // -- filter and sort -----------------------------------------------------------------------------------------------

  function statusOf(testId) {
    const result = state.results.get(testId);
    return result ? result.status : "running";
  }

  function searchableText(testId) {
    const result = state.results.get(testId) || state.starts.get(testId) || {};
    const tools = (list) => (list || []).map((t) => (t && (t.name || t.tool_name)) || "").join(" ");
    return [testId, result.query, result.response, result.error, (result.notes || []).join(" "),
            tools(result.expected_tools), tools(result.actual_tool_calls)]
      .filter((part) => typeof part === "string" && part).join("\n").toLowerCase();
  }

  function matches(testId) {
    const status = statusOf(testId);
    if (view.outcome === "not-passed") {
      if (status === "passed" || status === "running") return false;
    } else if (view.outcome !== "all" && status !== view.outcome) {
      return false;
    }
    return !view.text || searchableText(testId).includes(view.text);
  }

  function caseIndex(testId) {
    const known = state.results.get(testId) || state.starts.get(testId);
    return known && Number.isInteger(known.index) ? known.index : Number.MAX_SAFE_INTEGER;
  }

  function overallOf(testId) {
    const result = state.results.get(testId);
    const value = result && result.scores ? result.scores.overall : null;
    return typeof value === "number" ? value : null;
  }

  function compareRows(a, b) {
    const idA = a.dataset.testId;
    const idB = b.dataset.testId;
    const byCase = caseIndex(idA) - caseIndex(idB);
    if (view.sort === "id-asc") return collator.compare(idA, idB) || byCase;
    if (view.sort === "id-desc") return collator.compare(idB, idA) || byCase;
    if (view.sort === "score-desc" || view.sort === "score-asc") {
      const sa = overallOf(idA);
      const sb = overallOf(idB);
      if (sa === null || sb === null) return (sa === null) - (sb === null) || byCase;  // unscored rows last
      return (view.sort === "score-desc" ? sb - sa : sa - sb) || byCase;
    }
    return byCase;
  }

  function applyView() {
    const tbody = $("results").tBodies[0];
    const rows = Array.from(tbody.querySelectorAll("tr.case-row"));
    rows.sort(compareRows);
    let shown = 0;
    rows.forEach((row) => {
      const detail = row.nextElementSibling && row.nextElementSibling.classList.contains("details-row")
        ? row.nextElementSibling : null;
      const visible = matches(row.dataset.testId);
      row.hidden = !visible;
      if (visible) shown += 1;
      tbody.appendChild(row);  // appending moves the row: the table follows the sort order
      if (detail) { detail.hidden = !visible; tbody.appendChild(detail); }
    });
    const filtered = view.outcome !== "all" || view.text !== "";
    $("shown-count").textContent = filtered
      ? shown + " of " + rows.length + " cases match" + (shown === 0 ? " (change the filter to see the others)" : "")
      : rows.length + " cases";
    const byId = view.sort.startsWith("id-");
    const byScore = view.sort.startsWith("score-");
    $("th-test").setAttribute("aria-sort", byId ? (view.sort === "id-asc" ? "ascending" : "descending") : "none");
    $("th-overall").setAttribute("aria-sort",
      byScore ? (view.sort === "score-asc" ? "ascending" : "descending") : "none");
  }

  function wireViewControls() {
    $("filter-outcome").addEventListener("change", () => { view.outcome = $("filter-outcome").value; applyView(); });
    $("filter-text").addEventListener("input", () => {
      view.text = $("filter-text").value.trim().toLowerCase();
      applyView();
    });
    $("sort-by").addEventListener("change", () => { view.sort = $("sort-by").value; applyView(); });
  }

  // -- result rows ---------------------------------------------------------------------------------------------------

  function rowFor(testId) {
    return document.querySelector('tr.case-row[data-test-id="' + CSS.escape(testId) + '"]');
  }

  function addRunningRow(data) {
    const tbody = $("results").tBodies[0];
    const row = el("tr", "case-row");
    row.dataset.testId = data.test_id;
    row.appendChild(el("td", "test-id", data.test_id));
    const statusCell = el("td");
    statusCell.appendChild(el("span", "badge status-running", "running"));
    row.appendChild(statusCell);
    for (let i = 0; i < 5; i++) row.appendChild(el("td", "", ""));
    tbody.appendChild(row);
    $("results-panel").hidden = false;
  }

  function details(result) {
    const box = el("div", "details");
    box.appendChild(el("h4", "", "Query"));
    box.appendChild(el("pre", "query", result.query));
    if (result.error) {
      box.appendChild(el("h4", "", result.status === "unscored" ? "Why unscored" : "Error"));
      box.appendChild(el("pre", "error", result.error));
    }
    if (result.notes && result.notes.length) {
      box.appendChild(el("h4", "", "Notes"));
      const notes = el("ul", "notes");
      result.notes.forEach((n) => notes.appendChild(el("li", "", n)));
      box.appendChild(notes);
    }
    box.appendChild(el("h4", "", "Tool calls: expected and actual"));
    const sides = el("div", "side-by-side");
    const left = el("div");
    left.appendChild(el("div", "hint", "expected"));
    left.appendChild(el("pre", "expected-args", pretty(result.expected_tools)));
    const right = el("div");
    right.appendChild(el("div", "hint", "actual (name, arguments, result)"));
    right.appendChild(el("pre", "actual-args", pretty(result.actual_tool_calls)));
    sides.appendChild(left);
    sides.appendChild(right);
    box.appendChild(sides);
    box.appendChild(el("h4", "", "Full response"));
    box.appendChild(el("pre", "response", result.response === null ? "(no response)" : result.response));
    box.appendChild(el("h4", "", "Judge"));
    const judgeName = result.judge ? result.judge.name + " · prompt " + result.judge.prompt + " · " +
      result.judge.prompt_hash : "not judged";
    box.appendChild(el("div", "hint judge-name", judgeName));
    box.appendChild(el("pre", "judge-explanation", result.judge_explanation || "(no explanation)"));
    if (result.expected_keywords && result.expected_keywords.length) {
      box.appendChild(el("div", "hint", "expected keywords: " + result.expected_keywords.join(", ")));
    }
    return box;
  }

  function fillResultRow(result) {
    let row = rowFor(result.test_id);
    if (!row) { addRunningRow(result); row = rowFor(result.test_id); }
    row.replaceChildren();
    row.appendChild(el("td", "test-id", result.test_id));
    const statusCell = el("td");
    statusCell.appendChild(el("span", "badge status-" + result.status, result.status));
    row.appendChild(statusCell);
    const scores = result.scores || {};
    ["tool_selection", "argument_match", "faithfulness", "overall"].forEach((key) => {
      const cell = el("td");
      cell.appendChild(el("span", scoreClass(scores[key]) + " " + key.replace("_", "-"), formatScore(scores[key])));
      row.appendChild(cell);
    });
    row.appendChild(el("td", "hint", (result.duration_ms / 1000).toFixed(2) + " s"));
    row.dataset.status = result.status;
    row.addEventListener("click", () => {
      const next = row.nextElementSibling;
      if (next && next.classList.contains("details-row")) { next.remove(); return; }
      const detailRow = el("tr", "details-row");
      const cell = el("td");
      cell.colSpan = 7;
      cell.appendChild(details(result));
      detailRow.appendChild(cell);
      row.after(detailRow);
    });
  }

  // -- SSE over fetch ------------------------------------------------------------------------------------------------

  function handleEvent(name, data) {
    if (name === "test_case_start") {
      state.total = data.total;
      state.starts.set(data.test_id, data);
      if (!rowFor(data.test_id)) addRunningRow(data);
      updateProgress();
      applyView();
    } else if (name === "test_case_result") {
      state.total = data.total;
      state.cases[data.index] = data;
      state.results.set(data.test_id, data);
      state.done += 1;
      fillResultRow(data);
      updateProgress();
      applyView();
    } else if (name === "summary") {
      state.summary = data;
      renderSummary(data);
      setStatus("finished");
    } else if (name === "error") {
      state.error = data;
      showProblems([{ row: null, column: null, message: data.message }]);
      setStatus("failed");
    }
  }

  function parseBlock(block) {
    let name = "message";
    const data = [];
    block.split(/\r\n|\r|\n/).forEach((line) => {
      if (!line || line.startsWith(":")) return;
      const colon = line.indexOf(":");
      const field = colon === -1 ? line : line.slice(0, colon);
      let value = colon === -1 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") name = value;
      else if (field === "data") data.push(value);
    });
    if (!data.length) return;
    let payload;
    try { payload = JSON.parse(data.join("\n")); } catch (e) { return; }
    handleEvent(name, payload);
  }

  async function readStream(response) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let match;
      while ((match = /\r\n\r\n|\n\n|\r\r/.exec(buffer)) !== null) {
        const block = buffer.slice(0, match.index);
        buffer = buffer.slice(match.index + match[0].length);
        parseBlock(block);
      }
    }
    if (buffer.trim()) parseBlock(buffer);
  }

  async function run() {
    if (!state.file || state.running) return;
    const agentUrl = $("agent-url").value.trim();
    const form = new FormData();
    form.append("file", state.file, state.file.name);
    form.append("agent_url", agentUrl);
    form.append("concurrency", $("concurrency").value);
    form.append("judge", $("judge").value);
    if ($("judge").value === "llm") form.append("connector", $("connector").value);
    Object.assign(state, { cases: [], summary: null, error: null, running: true, total: 0, done: 0,
                           agentUrl: agentUrl, fileName: state.file.name, startedAt: new Date().toISOString(),
                           starts: new Map(), results: new Map() });
    $("results").tBodies[0].replaceChildren();
    $("shown-count").textContent = "";
    $("summary").hidden = true;
    delete $("summary").dataset.done;
    $("progress-panel").hidden = false;
    $("run-button").disabled = true;
    $("download-button").disabled = true;
    showProblems([]);
    updateProgress();
    setStatus("running…");
    try {
      const response = await fetch("/evaluations/run", { method: "POST", body: form });
      if (!response.ok) {
        let body = {};
        try { body = await response.json(); } catch (e) { body = { error: "HTTP " + response.status }; }
        const problems = body.problems && body.problems.length ? body.problems
          : [{ row: null, column: null, message: body.error || "HTTP " + response.status }];
        showProblems(problems);
        setStatus("not started");
        $("progress-panel").hidden = true;
        return;
      }
      await readStream(response);
      if (!state.summary && !state.error) setStatus("the stream ended early");
    } catch (error) {
      showProblems([{ row: null, column: null, message: "connection failed: " + error }]);
      setStatus("failed");
    } finally {
      state.running = false;
      $("run-button").disabled = !state.file;
      $("download-button").disabled = state.cases.length === 0 && !state.summary;
    }
  }

  function download() {
    const payload = {
      generated_at: new Date().toISOString(), started_at: state.startedAt, agent_url: state.agentUrl,
      suite: state.fileName, summary: state.summary, error: state.error,
      cases: state.cases.filter((c) => c !== undefined),
    };
    const blob = new Blob([JSON.stringify(payload, null, 2)], { type: "application/json" });
    const url = URL.createObjectURL(blob);
    const link = el("a");
    link.href = url;
    link.download = "arena-csv-results-" + (state.startedAt || "run").replace(/[:.]/g, "-") + ".json";
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  async function loadConfig() {
    try {
      const config = await (await fetch("/evaluations/config")).json();
      if (config.default_agent_url && !$("agent-url").value) $("agent-url").value = config.default_agent_url;
      $("concurrency").value = config.default_concurrency;
      $("concurrency").max = config.max_concurrency;
      $("limit-bytes").textContent = (config.max_bytes / (1024 * 1024)).toFixed(0) + " MB";
      $("limit-cases").textContent = String(config.max_cases);
      $("sample-hint").hidden = !config.sample_available;
      if (config.offline) { $("judge").value = "lexical"; $("judge").disabled = true; }
      syncConnector();
    } catch (e) { /* defaults in the markup stay */ }
  }

  async function useSample() {
    const response = await fetch("/evaluations/sample.csv");
    if (!response.ok) return;
    const blob = await response.blob();
    chooseFile(new File([blob], "finance_suite.csv", { type: "text/csv" }));
  }

  // The connector (class path, model, key) matters only to the LLM judge: shown only while it is chosen.
  function syncConnector() {
    const llm = $("judge").value === "llm" && !$("judge").disabled;
    $("connector-field").hidden = !llm;
    $("connector").disabled = !llm;
  }

  document.addEventListener("DOMContentLoaded", () => {
    wireDropZone();
    wireViewControls();
    $("run-button").addEventListener("click", run);
    $("download-button").addEventListener("click", download);
    $("sample-button").addEventListener("click", useSample);
    $("judge").addEventListener("change", syncConnector);
    syncConnector();  // a reload may restore "llm" in the select
    loadConfig();
  });
})();
