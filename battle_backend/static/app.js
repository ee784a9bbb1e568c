// Arena battle backend: live updates for the battle page (SSE) and the battle list (WebSocket).
// Served from /static under a Content-Security-Policy without inline scripts. Fragments inserted here are
// rendered and sanitised by the server; everything else is set with textContent.
(function () {
  "use strict";

  function setText(el, text) {
    if (el) { el.textContent = text; }
  }

  function nearBottom() {
    return window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
  }

  function initBattlePage(root) {
    var battleId = root.dataset.battleId;
    var lastSeq = Number(root.dataset.lastSeq || "0");
    var timeline = document.getElementById("timeline");
    var statusBox = document.getElementById("battle-status");
    var resultBox = document.getElementById("battle-result");
    var live = document.getElementById("live-indicator");
    var counter = document.getElementById("event-counter");
    var url = "/battles/" + encodeURIComponent(battleId) + "/events?since=" + lastSeq;
    var source = new EventSource(url);

    source.addEventListener("open", function () {
      setText(live, "live");
      live.className = "live live-on";
    });
    source.addEventListener("battle_event", function (message) {
      var data = JSON.parse(message.data);
      if (typeof data.seq !== "number" || data.seq <= lastSeq) { return; }
      var follow = nearBottom();
      timeline.insertAdjacentHTML("beforeend", data.html);
      lastSeq = data.seq;
      root.dataset.lastSeq = String(lastSeq);
      setText(counter, timeline.children.length + " events");
      if (follow) { window.scrollTo(0, document.body.scrollHeight); }
    });
    source.addEventListener("battle_state", function (message) {
      var data = JSON.parse(message.data);
      root.dataset.state = data.state;
      statusBox.innerHTML = data.status_html;
      resultBox.innerHTML = data.result_html;
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

  function initIndexPage(root) {
    var table = document.getElementById("battle-list");
    if (!table || !window.WebSocket) { return; }
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + window.location.host + "/ws/battles");
    socket.addEventListener("message", function (message) {
      var data = JSON.parse(message.data);
      if (data.type !== "battle_update" || !data.battle) { return; }
      var battle = data.battle;
      var row = table.querySelector('tr[data-battle-id="' + CSS.escape(battle.battle_id) + '"]');
      if (!row) {
        var body = table.tBodies[0];
        var empty = body.querySelector("tr.empty");
        if (empty) { empty.remove(); }
        row = document.createElement("tr");
        row.dataset.battleId = battle.battle_id;
        var cells = ["", "", battle.green_agent_id, "", battle.created_at || "", "", ""];
        cells.forEach(function (text) { var td = document.createElement("td"); td.textContent = text; row.appendChild(td); });
        var link = document.createElement("a");
        link.href = "/ui/battles/" + encodeURIComponent(battle.battle_id);
        link.textContent = battle.battle_id.slice(0, 8);
        row.cells[0].appendChild(link);
        row.cells[1].appendChild(document.createElement("span"));
        row.cells[5].className = "winner";
        row.cells[6].className = "event-count";
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
