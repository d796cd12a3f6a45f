/* Live pending count in the nav: follows /ws/inbox/ and keeps #inbox-count current.
 *
 * Without this script the badge shows the count rendered with the page. With it:
 *  - `inbox.synced` (sent on every connect) and `inbox.count` (after the notices of
 *    items created or closed) set the count: the server counts the items this viewer may
 *    decide, so an item of their own run or one needing a role they lack never counts;
 *  - every frame is passed on as an `inbox:frame` event on document, and the socket's
 *    state as `inbox:socket` ({status: live | reconnecting | offline}), so the inbox page
 *    (inbox.js) follows the same socket instead of opening a second one;
 *  - the socket reconnects with backoff; closes 4401/4404 are final and silent
 *    (signed out, or gone): the server-rendered count stays. Approvers get every
 *    notice; anyone else the counts alone (their own runs' questions).
 */
(function () {
  "use strict";

  var badge = document.getElementById("inbox-count");
  if (!badge || !("WebSocket" in window)) return;

  var SOCKET_PATH = "/ws/inbox/";
  var FINAL_CLOSES = { 4401: true, 4404: true };
  var MAX_BACKOFF_MS = 30000;
  var PING_EVERY_MS = 25000;

  var count = parseInt(badge.dataset.count, 10) || 0;
  var renderedCount = count;   // what the page was rendered with
  var attempts = 0;
  var connects = 0;
  var pingTimer = null;

  function show(next) {
    count = Math.max(0, next);
    badge.textContent = String(count);
    badge.dataset.count = String(count);
    badge.setAttribute("aria-label", count + " pending");
  }

  function announce(name, detail) {
    document.dispatchEvent(new CustomEvent(name, { detail: detail }));
  }

  function handle(frame) {
    if (!frame || typeof frame.type !== "string") return;
    if (frame.type === "inbox.synced" && typeof frame.pending === "number") {
      attempts = 0;
      // a reconnect, or items that came or went between the page's render and this socket
      frame.missed = connects > 1 || frame.pending !== renderedCount;
      show(frame.pending);
    } else if (frame.type === "inbox.count" && typeof frame.pending === "number") {
      show(frame.pending);
    }
    announce("inbox:frame", frame);
  }

  function connect() {
    var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
    var socket = new WebSocket(scheme + window.location.host + SOCKET_PATH);
    socket.onmessage = function (event) {
      var frame;
      try { frame = JSON.parse(event.data); } catch (error) { return; /* not JSON: ignore the frame */ }
      handle(frame);
    };
    socket.onopen = function () {
      connects += 1;
      announce("inbox:socket", { status: "live" });
      pingTimer = window.setInterval(function () {
        if (socket.readyState === WebSocket.OPEN) socket.send('{"type":"ping"}');
      }, PING_EVERY_MS);
    };
    socket.onclose = function (event) {
      window.clearInterval(pingTimer);
      if (FINAL_CLOSES[event.code]) {
        announce("inbox:socket", { status: "offline", code: event.code });
        return;
      }
      announce("inbox:socket", { status: "reconnecting" });
      // 1 s, 2 s, 4 s ... up to 30 s, with jitter so many tabs do not reconnect together
      var delay = Math.min(MAX_BACKOFF_MS, 1000 * Math.pow(2, attempts));
      attempts += 1;
      window.setTimeout(connect, delay * (0.75 + Math.random() * 0.5));
    };
  }

  // after every deferred script ran, so the page's own script (inbox.js) listens before
  // the socket opens and its first frame comes. Deferred scripts run while readyState is
  // already "interactive", before DOMContentLoaded: connecting then, the socket could open
  // while inbox.js was still loading, and the page never heard it was live. A script run
  // after DOMContentLoaded (readyState "interactive" too) starts on load.
  var started = false;
  function start() {
    if (started) return;
    started = true;
    connect();
  }
  if (document.readyState === "complete") start();
  else {
    document.addEventListener("DOMContentLoaded", start);
    window.addEventListener("load", start);
  }
})();
