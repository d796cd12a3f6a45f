/* Live run view: follows /ws/runs/<id>/ and keeps the server-rendered page current.
 *
 * Without this script the page is a complete snapshot. With it:
 *  - `text` events are appended to their run's output area as they arrive;
 *  - any other event schedules a refresh from /runs/<id>/live/, which the server renders
 *    from the event log with the page's own fragments (one copy of the markup): sections
 *    marked data-live-section are replaced, timeline rows past the last one shown are
 *    appended;
 *  - the socket reconnects by itself with backoff, asking for what came after the last
 *    seq it has of every run in the tree (after=N&after.<run id>=M); events are
 *    de-duplicated by (run_id, seq), since the socket carries descendants' events too;
 *  - it asks for batched frames (batch=1): a frame may hold a JSON array of events, which
 *    a busy tree watched by many people costs the server far less than a frame each.
 */
(function () {
  "use strict";

  var page = document.getElementById("run-page");
  if (!page || !("WebSocket" in window) || !window.fetch) return;

  var runId = page.dataset.runId;
  var liveUrl = page.dataset.liveUrl;
  var wsPath = page.dataset.wsPath;
  var statusEl = document.getElementById("live-status");
  var reloadLink = document.getElementById("reload-link");

  var REFRESH_DELAY_MS = 150;
  var MAX_BACKOFF_MS = 15000;
  var PING_EVERY_MS = 25000;
  var FINAL_CLOSE = { 4401: "Signed out: reload the page to sign in again.",
                      4403: "You may not watch this run.",
                      4404: "This run no longer exists." };

  var cursors = {};          // run id -> last seq received (or rendered in the snapshot)
  try { cursors = JSON.parse(page.dataset.cursors || "{}"); } catch (error) { cursors = {}; }
  var pendingText = {};      // run id -> [{seq, delta, newTurn}] the page may not show yet
  var turnEnded = {};        // run id -> a model call closed its last turn (next text: new paragraph)
  var socket = null;
  var attempts = 0;
  var pingTimer = null;
  var refreshTimer = null;
  var refreshing = false;
  var refreshAgain = false;
  var wantStreams = false;
  var streamsInFlight = false;

  function setStatus(status, text) {
    statusEl.dataset.status = status;
    statusEl.textContent = text;
    if (reloadLink) reloadLink.hidden = status === "live" || status === "connecting";
  }

  // -- the socket -------------------------------------------------------------------

  function socketUrl() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var params = ["batch=1", "after=" + (cursors[runId] || 0)];
    Object.keys(cursors).forEach(function (id) {
      if (id !== runId) params.push("after." + encodeURIComponent(id) + "=" + cursors[id]);
    });
    return scheme + location.host + wsPath + "?" + params.join("&");
  }

  function connect() {
    setStatus(attempts ? "reconnecting" : "connecting", attempts ? "Reconnecting…" : "Connecting…");
    var ws = new WebSocket(socketUrl());
    socket = ws;
    ws.onmessage = function (message) {
      var frame;
      try { frame = JSON.parse(message.data); } catch (error) { return; }
      if (Array.isArray(frame)) frame.forEach(onFrame); else onFrame(frame);
    };
    ws.onclose = function (event) {
      if (socket !== ws) return;
      socket = null;
      clearInterval(pingTimer);
      if (FINAL_CLOSE[event.code]) {
        setStatus("offline", FINAL_CLOSE[event.code]);
        return;
      }
      scheduleReconnect();
    };
    clearInterval(pingTimer);
    pingTimer = setInterval(function () {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "ping" }));
    }, PING_EVERY_MS);
  }

  function scheduleReconnect() {
    var delay = Math.min(MAX_BACKOFF_MS, 500 * Math.pow(2, attempts)) * (0.75 + Math.random() * 0.5);
    attempts += 1;
    setStatus("reconnecting", "Disconnected: reconnecting in " + Math.ceil(delay / 1000) + " s…");
    setTimeout(connect, delay);
  }

  function onFrame(frame) {
    if (typeof frame.seq !== "number") {
      if (frame.type === "synced") {
        attempts = 0;
        setStatus("live", "Live");
        scheduleRefresh();   // catch up on whatever changed while we were away
      }
      return;                // pong and error frames
    }
    var last = cursors[frame.run_id] || 0;
    if (frame.seq <= last) return;           // seen already (backlog and live overlap)
    if (frame.seq > last + 1) wantStreams = true;   // a hole: take the server's text
    cursors[frame.run_id] = frame.seq;
    if (frame.type === "text") {
      appendText(frame.run_id, frame.seq, (frame.data && frame.data.delta) || "");
    } else {
      if (frame.type === "model_call") turnEnded[frame.run_id] = true;
      scheduleRefresh();
    }
  }

  // -- streamed text ------------------------------------------------------------------

  function streamBlock(id) {
    var blocks = document.querySelectorAll("[data-stream-run]");
    for (var i = 0; i < blocks.length; i++) {
      if (blocks[i].dataset.streamRun === id) return blocks[i];
    }
    return null;
  }

  function appendText(id, seq, delta) {
    var block = streamBlock(id);
    var newTurn = id in turnEnded ? turnEnded[id] : !!block && block.dataset.turnEnded === "1";
    turnEnded[id] = false;
    (pendingText[id] = pendingText[id] || []).push({ seq: seq, delta: delta, newTurn: newTurn });
    if (!applyText(id)) {
      wantStreams = true;    // a run without an output area yet: ask the server for it
      scheduleRefresh();
    }
  }

  function applyText(id) {
    var block = streamBlock(id);
    if (!block) return false;
    var shown = parseInt(block.dataset.seq || "0", 10);
    var pre = block.querySelector(".stream-text");
    var atBottom = pre.scrollHeight - pre.scrollTop - pre.clientHeight < 24;
    (pendingText[id] || []).forEach(function (chunk) {
      if (chunk.seq > shown) {
        var separator = chunk.newTurn && pre.textContent ? "\n\n" : "";
        pre.appendChild(document.createTextNode(separator + chunk.delta));
        shown = chunk.seq;
      }
    });
    block.dataset.seq = String(shown);
    // while a refresh of the output areas is on its way, keep the chunks: the fresh
    // render may predate them, and they are applied again on top of it
    if (!streamsInFlight) pendingText[id] = [];
    if (atBottom) pre.scrollTop = pre.scrollHeight;
    return true;
  }

  // -- refreshing the server-rendered sections ------------------------------------------

  function scheduleRefresh() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(refresh, REFRESH_DELAY_MS);
  }

  function refresh() {
    refreshTimer = null;
    if (refreshing) { refreshAgain = true; return; }
    refreshing = true;
    streamsInFlight = wantStreams;
    wantStreams = false;
    var timeline = document.getElementById("run-timeline");
    var url = liveUrl + "?after=" + encodeURIComponent(timeline.dataset.after || "0") +
              (streamsInFlight ? "&streams=1" : "");
    fetch(url, { credentials: "same-origin", headers: { "HX-Request": "true" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(applyRefresh)
      .catch(function () {
        if (streamsInFlight) wantStreams = true;
        // with the socket down, its reconnection ("synced") refreshes instead
        if (socket) refreshAgain = true;
      })
      .then(function () {
        refreshing = false;
        streamsInFlight = false;
        Object.keys(pendingText).forEach(applyText);
        if (refreshAgain) {
          refreshAgain = false;
          setTimeout(scheduleRefresh, 500);
        }
      });
  }

  function applyRefresh(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html");
    fresh.querySelectorAll("[data-live-section]").forEach(function (section) {
      var current = document.getElementById(section.id);
      if (!current || current.isEqualNode(section)) return;
      // sections holding a form (the controls, the approvals) change only when their key
      // does, so a message being typed is not wiped by an unrelated event
      if (section.dataset.liveKey !== undefined && section.dataset.liveKey === current.dataset.liveKey) return;
      current.replaceWith(document.importNode(section, true));
    });
    var rows = fresh.querySelector("[data-live-append]");
    if (!rows) return;
    var list = document.getElementById(rows.dataset.liveAppend);
    var last = list.lastElementChild ? parseInt(list.lastElementChild.dataset.seq, 10) : 0;
    Array.prototype.slice.call(rows.children).forEach(function (row) {
      var seq = parseInt(row.dataset.seq, 10);
      if (seq > last) {
        list.appendChild(document.importNode(row, true));
        last = seq;
      }
    });
    list.dataset.after = String(Math.max(parseInt(list.dataset.after || "0", 10),
                                         parseInt(rows.dataset.after || "0", 10)));
    var empty = document.getElementById("timeline-empty");
    if (empty && list.children.length) empty.remove();
  }

  window.addEventListener("pagehide", function () {
    if (socket) { var ws = socket; socket = null; ws.close(1000); }
  });
  window.addEventListener("pageshow", function (event) {
    if (event.persisted && !socket) connect();   // back from the back/forward cache
  });
  connect();
})();
