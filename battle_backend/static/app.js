// Arena battle backend: live updates for the battle page (SSE) and the battle list (WebSocket), and the attempt
// filter of the battle page. Served from /static under a Content-Security-Policy without inline scripts. Fragments
// inserted here are rendered and sanitised by the server; everything else is set with textContent.
(function () {
  "use strict";

  function setText(el, text) {
    if (el) { el.textContent = text; }
  }


  // --- the attempt filter (same rule as battle_backend/views/attempt_filter.py) -----------------------------------
  function filterValues(form) {
    var values = { outcome: "", category: "", task: "" };
    if (!form) { return values; }
    Array.prototype.forEach.call(form.querySelectorAll("select[data-filter]"), function (select) {
      values[select.dataset.filter] = select.value;
    });
    return values;
  }

  function cellMatches(values, cell) {
    if (!values.outcome && !values.category) { return true; }
    var outcome = cell.dataset.outcome || "";
    if (!outcome) { return false; }
    return (!values.outcome || outcome === values.outcome) &&
      (!values.category || (cell.dataset.category || "") === values.category);
  }

  function applyFilter(form) {
    var values = filterValues(form);
    var rows = document.querySelectorAll("table.attempt-grid tbody tr[data-task]");
    Array.prototype.forEach.call(rows, function (row) {
      var any = false;
      Array.prototype.forEach.call(row.querySelectorAll("td.cell"), function (cell) {
        var match = cellMatches(values, cell);
        cell.classList.toggle("filtered-out", !match);
        if (match && cell.dataset.outcome) { any = true; }
      });
      var taskOk = !values.task || row.dataset.task === values.task;
      row.hidden = !taskOk || (!any && Boolean(values.outcome || values.category));
    });
    var active = values.outcome || values.category || values.task;
    setText(document.getElementById("filter-status"), active ? "filtered" : "");
  }

  function addOption(select, value) {
    if (!select || !value) { return; }
    var exists = Array.prototype.some.call(select.options, function (option) { return option.value === value; });
    if (exists) { return; }
    var option = document.createElement("option");
    option.value = value;
    option.textContent = value;
    select.appendChild(option);
  }

  function refreshOptions(form) {
    if (!form) { return; }
    var category = form.querySelector('select[data-filter="category"]');
    var task = form.querySelector('select[data-filter="task"]');
    var rows = document.querySelectorAll("table.attempt-grid tbody tr[data-task]");
    Array.prototype.forEach.call(rows, function (row) {
      addOption(task, row.dataset.task);
      Array.prototype.forEach.call(row.querySelectorAll("td.cell[data-category]"), function (cell) {
        addOption(category, cell.dataset.category);
      });
    });
    if (rows.length) { form.hidden = false; }
  }

  function initFilter() {
    var form = document.getElementById("attempt-filter");
    if (!form) { return null; }
    form.addEventListener("change", function () {
      applyFilter(form);
      var values = filterValues(form);
      var params = new URLSearchParams();
      Object.keys(values).forEach(function (key) { if (values[key]) { params.set(key, values[key]); } });
      var query = params.toString();
      window.history.replaceState(null, "", window.location.pathname + (query ? "?" + query : ""));
    });
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      applyFilter(form);
    });
    var clear = form.querySelector(".filter-clear");
    if (clear) {
      clear.addEventListener("click", function (event) {
        event.preventDefault();
        Array.prototype.forEach.call(form.querySelectorAll("select[data-filter]"), function (select) { select.value = ""; });
        applyFilter(form);
        window.history.replaceState(null, "", window.location.pathname);
      });
    }
    return form;
  }

  // --- the battle page's timeline and progress strip (issue 26: the page never scrolls itself) -------------------
  // The timeline is a box of its own: new events scroll that box while "follow new events" is ticked; scrolling the
  // box up unticks it, reaching its end again (or ticking it) follows again. The window is never scrolled for the
  // user, so the progress panel stays where they left it.
  function initTimelineFollow(timeline) {
    var box = document.getElementById("timeline-follow");
    var noop = { added: function () {} };
    if (!timeline || !box) { return noop; }
    var label = box.closest("label");
    if (label) { label.hidden = false; }
    var lastTop = 0;
    function atEnd() { return timeline.scrollTop + timeline.clientHeight >= timeline.scrollHeight - 4; }
    function toEnd() {
      timeline.scrollTop = timeline.scrollHeight;
      lastTop = timeline.scrollTop;
    }
    timeline.addEventListener("scroll", function () {
      var top = timeline.scrollTop;
      if (top < lastTop - 1 && box.checked) {
        box.checked = false;
      } else if (top > lastTop && !box.checked && atEnd()) {
        box.checked = true;
      }
      lastTop = top;
    }, { passive: true });
    box.addEventListener("change", function () { if (box.checked) { toEnd(); } });
    if (box.checked) { toEnd(); }
    return { added: function () { if (box.checked) { toEnd(); } } };
  }

  // A one-line copy of the progress counters, fixed at the top of the window while the progress panel is scrolled
  // out of view (text copied with textContent from the server-rendered panel).
  function initProgressStrip(progressBox) {
    var strip = document.getElementById("progress-strip");
    var noop = { update: function () {} };
    if (!strip || !progressBox) { return noop; }
    var panelVisible = true;
    function text(id) {
      var el = document.getElementById(id);
      if (!el) { return ""; }
      var first = el.firstChild;
      return (first && first.nodeType === 3 ? first.nodeValue : el.textContent).trim();
    }
    function update() {
      var hasPanel = Boolean(progressBox.querySelector(".progress-box"));
      if (hasPanel) {
        setText(strip.querySelector(".strip-done"), text("progress-done"));
        setText(strip.querySelector(".strip-pass1"), text("progress-pass1"));
        setText(strip.querySelector(".strip-eta"), text("progress-eta"));
      }
      strip.hidden = !hasPanel || panelVisible;
    }
    if (window.IntersectionObserver) {
      new IntersectionObserver(function (entries) {
        panelVisible = entries[entries.length - 1].isIntersecting;
        update();
      }).observe(progressBox);
    }
    update();
    return { update: update };
  }

  // --- the battle page ----------------------------------------------------------------------------------------
  function initBattlePage(root) {
    var battleId = root.dataset.battleId;
    var lastSeq = Number(root.dataset.lastSeq || "0");
    var timeline = document.getElementById("timeline");
    var statusBox = document.getElementById("battle-status");
    var resultBox = document.getElementById("battle-result");
    var progressBox = document.getElementById("battle-progress");
    var announce = document.getElementById("progress-announce");
    var live = document.getElementById("live-indicator");
    var counter = document.getElementById("event-counter");
    var filter = initFilter();
    var timelineView = initTimelineFollow(timeline);
    var strip = initProgressStrip(progressBox);
    var url = "/battles/" + encodeURIComponent(battleId) + "/events?since=" + lastSeq;
    var source = new EventSource(url);

    function grids() {
      refreshOptions(filter);
      applyFilter(filter);
    }

    source.addEventListener("open", function () {
      setText(live, "live");
      live.className = "live live-on";
    });
    source.addEventListener("battle_event", function (message) {
      var data = JSON.parse(message.data);
      if (typeof data.seq !== "number" || data.seq <= lastSeq) { return; }
      timeline.insertAdjacentHTML("beforeend", data.html);
      lastSeq = data.seq;
      root.dataset.lastSeq = String(lastSeq);
      setText(counter, timeline.children.length + " events");
      timelineView.added();  // scrolls the timeline's own box when following, never the page
    });
    source.addEventListener("battle_state", function (message) {
      var data = JSON.parse(message.data);
      root.dataset.state = data.state;
      statusBox.innerHTML = data.status_html;
      resultBox.innerHTML = data.result_html;
      grids();
    });
    source.addEventListener("battle_progress", function (message) {
      var data = JSON.parse(message.data);
      if (!progressBox || typeof data.html !== "string") { return; }
      progressBox.innerHTML = data.html;
      grids();
      strip.update();
      if (data.html && typeof data.done_text === "string") {
        setText(announce, "Attempts done: " + data.done_text + ". pass^1 so far: " + data.pass1_text +
          ". ETA: " + data.eta_text + ".");
      }
    });
    source.addEventListener("end", function () {
      source.close();
      setText(live, "battle over");
      live.className = "live live-off";
    });
    source.addEventListener("error", function () {
      if (source.readyState !== EventSource.CLOSED) {
        setText(live, "reconnecting…");
        live.className = "live live-wait";
      }
    });
  }

  // --- the battle list ------------------------------------------------------------------------------------------
  function rowFrom(html) {
    var holder = document.createElement("tbody");
    holder.innerHTML = html;
    return holder.querySelector("tr");
  }

  function initIndexPage(root) {
    var table = document.getElementById("battle-list");
    if (!table || !window.WebSocket) { return; }
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + window.location.host + "/ws/battles");
    socket.addEventListener("message", function (message) {
      var data = JSON.parse(message.data);
      if (data.type !== "battle_update" || !data.battle) { return; }
      var battle = data.battle;
      var body = table.tBodies[0];
      var row = table.querySelector('tr[data-battle-id="' + CSS.escape(battle.battle_id) + '"]');
      var fresh = typeof data.row_html === "string" ? rowFrom(data.row_html) : null;
      if (fresh) {
        // the server-rendered row: aliases of the green agent and the opponents, state, winner, event count
        var empty = body.querySelector("tr.empty");
        if (empty) { empty.remove(); }
        if (row) { row.replaceWith(fresh); } else { body.insertBefore(fresh, body.firstChild); }
        return;
      }
      if (!row) {
        var emptyRow = body.querySelector("tr.empty");
        if (emptyRow) { emptyRow.remove(); }
        row = document.createElement("tr");
        row.dataset.battleId = battle.battle_id;
        var cells = ["", "", battle.green_agent_id, "", battle.created_at || "", "", "", ""];
        cells.forEach(function (text) { var td = document.createElement("td"); td.textContent = text; row.appendChild(td); });
        var link = document.createElement("a");
        link.href = "/ui/battles/" + encodeURIComponent(battle.battle_id);
        link.textContent = battle.battle_id.slice(0, 8);
        row.cells[0].appendChild(link);
        row.cells[1].appendChild(document.createElement("span"));
        row.cells[5].className = "score";
        row.cells[6].className = "winner";
        row.cells[7].className = "event-count";
        body.insertBefore(row, body.firstChild);
      }
      var state = row.cells[1].querySelector(".state") || row.cells[1].appendChild(document.createElement("span"));
      state.className = "state state-" + battle.state;
      state.textContent = battle.state;
      var extra = row.cells[1].querySelector(".muted");
      if (extra && battle.state !== "queued") { extra.remove(); }
      setText(row.querySelector(".winner"), battle.result ? String(battle.result.winner) : "");
      setText(row.querySelector(".event-count"), String(battle.event_count || 0));
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    var battlePage = document.getElementById("battle-page");
    if (battlePage) { initBattlePage(battlePage); }
    var indexPage = document.getElementById("index-page");
    if (indexPage) { initIndexPage(indexPage); }
  });
})();

// --- the runs home (arena view runs/): filters submit on change; the compare button wants exactly two runs -------
(function () {
  "use strict";

  function initRunsHome() {
    var filter = document.getElementById("runs-filter");
    if (filter) {
      Array.prototype.forEach.call(filter.querySelectorAll("select[data-autosubmit]"), function (select) {
        select.addEventListener("change", function () { filter.submit(); });
      });
    }
    var form = document.getElementById("compare-form");
    if (!form) { return; }
    var button = document.getElementById("compare-button");
    var hint = document.getElementById("compare-hint");
    function update() {
      var ticked = form.querySelectorAll('input[name="run"]:checked');
      Array.prototype.forEach.call(form.querySelectorAll('input[name="run"]'), function (box) {
        var row = box.closest("tr");
        if (row) { row.classList.toggle("picked", box.checked); }
      });
      button.disabled = ticked.length !== 2;
      hint.textContent = ticked.length === 2 ? "ready: open the comparison" :
        "tick two runs (" + ticked.length + " ticked): the statistics of arena compare";
    }
    form.addEventListener("change", update);
    update();
  }

  document.addEventListener("DOMContentLoaded", function () {
    if (document.getElementById("runs-home")) { initRunsHome(); }
  });
})();
