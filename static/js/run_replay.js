/* Replay of a finished run, on its own page, from its stored events (/runs/<id>/replay/).
 *
 * "Replay" (offered once the run has ended; or a link with ?at=N) turns the page back to the start, or to the N-th event
 * of the tree, and plays it forward at 0.5x–10x: the tree (each run's state, its own and
 * its subtree's tokens, cost, time and tool calls, its budget bars; runs not started yet
 * are hidden), the budget meters, the streamed text, the waterfall's cursor and the
 * timeline re-play in the order the events were stored. Pause, step (. and ,), and the
 * scrubber move through it; "Copy link" gives a link to the moment shown. The outcome
 * shows again at the end. Gaps between events play as they were, held between
 * MIN_GAP_MS and MAX_GAP_MS, so a burst stays visible and a long model call does not
 * stall it. Timeline rows are the server's own, fetched as the cursor reaches them
 * (/runs/<id>/live/?since=A&until=B), the newest ROW_LIMIT of them kept.
 */
(function () {
  "use strict";

  var page = document.getElementById("run-page");
  var bar = document.getElementById("replay-bar");
  var startButton = document.getElementById("replay-start");
  if (!page || !bar || !startButton || !window.fetch) return;

  var MIN_GAP_MS = 80;
  var MAX_GAP_MS = 1500;
  var ROW_LIMIT = 500;
  var AHEAD = 200;          // rows fetched past the cursor while playing
  var TERMINAL = { COMPLETE: 1, RETURNED: 1, FAILED: 1, TIMEOUT: 1, REJECTED: 1, CANCELLED: 1 };
  var HELD = ["run-outcome", "run-approvals", "run-findings"];   // shown at the end only

  var liveUrl = page.dataset.liveUrl;
  var timeline = document.getElementById("run-timeline");
  var controls = {};
  bar.querySelectorAll("[data-replay]").forEach(function (el) { controls[el.dataset.replay] = el; });

  var data = null;          // {runs: [{id, parent}], events: [[id, run, type, ms, extra]], states}
  var runs = [];            // per run index: its figures at the cursor
  var clock = [];           // per event: its time on the replay's clock (gaps held)
  var cursor = -1;          // the last event applied (-1: before the first)
  var playing = false;
  var playClock = 0;        // where the clock is while playing
  var lastFrame = 0;
  var loadedUntil = 0;      // timeline rows held up to this event id…
  var heldFrom = 0;         // …from the one after this
  var nodes = {};           // run id -> its tree item
  var fetching = null;
  var written = new WeakMap();   // element -> the text last written (skips equal writes)

  // -- formats, as the server writes them (snapshot.format_usd / format_seconds) -----------

  function tokens(n) { return Math.round(n).toLocaleString("en-US"); }
  function usd(amount) {
    if (!amount) return "$0";
    return amount < 1 ? "$" + amount.toFixed(4)
                      : "$" + amount.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 });
  }
  function seconds(s) {
    if (s < 60) return s.toFixed(1) + " s";
    var minutes = Math.floor(Math.round(s) / 60), rest = Math.round(s) % 60;
    if (minutes < 60) return minutes + " min " + rest + " s";
    return Math.floor(minutes / 60) + " h " + (minutes % 60) + " min";
  }

  function write(el, text) {
    if (el && written.get(el) !== text) { el.textContent = text; written.set(el, text); }
  }

  // -- the state at the cursor --------------------------------------------------------------

  function resetRuns() {
    runs = data.runs.map(function (run) {
      return { id: run.id, parent: run.parent, state: "", start: null, end: null, tokens: 0, cost: 0,
               calls: 0, tools: 0, text: "", turnEnded: false, size: 1 };
    });
    var index = {};
    runs.forEach(function (run, i) { index[run.id] = i; });
    runs.forEach(function (run) { run.parentIndex = run.parent in index ? index[run.parent] : -1; });
    for (var i = runs.length - 1; i > 0; i--) if (runs[i].parentIndex >= 0) runs[runs[i].parentIndex].size += runs[i].size;
    cursor = -1;
  }

  function apply(event) {
    var run = runs[event[1]], kind = event[2], extra = event[4];
    if (run.start === null) run.start = event[3];
    if (kind === "state") {
      run.state = extra;
      if (TERMINAL[extra]) run.end = event[3];
    } else if (kind === "model_call") {
      run.tokens += extra[0]; run.cost += extra[1]; run.calls += 1; run.turnEnded = true;
    } else if (kind === "tool_call") {
      run.tools += 1;
    } else if (kind === "text") {
      run.text += (run.turnEnded && run.text ? "\n\n" : "") + extra;
      run.turnEnded = false;
    }
  }

  function seek(target) {
    target = Math.max(-1, Math.min(data.events.length - 1, target));
    if (target < cursor) resetRuns();
    while (cursor < target) apply(data.events[++cursor]);
    draw();
  }

  // -- drawing ------------------------------------------------------------------------------

  function draw() {
    var now = cursor >= 0 ? data.events[cursor][3] : (data.events.length ? data.events[0][3] : 0);
    // own figures, then subtree sums (runs are listed parents first: sum from the end)
    var sums = runs.map(function (run) {
      var time = run.start === null ? 0 : ((run.end !== null ? run.end : now) - run.start) / 1000;
      run.time = Math.max(0, time);
      return { tokens: run.tokens, cost: run.cost, tools: run.tools, time: run.time, calls: run.calls };
    });
    for (var i = runs.length - 1; i > 0; i--) {
      var up = runs[i].parentIndex;
      if (up < 0) continue;
      ["tokens", "cost", "tools", "time", "calls"].forEach(function (key) { sums[up][key] += sums[i][key]; });
    }
    runs.forEach(function (run, i) { drawNode(run, sums[i]); });
    drawMeters(runs[0], sums[0]);
    drawStreams();
    drawWaterfall(now);
    drawRows();
    var at = cursor + 1, total = data.events.length;
    write(controls.where, "event " + at + " of " + total + " · " +
          seconds(Math.max(0, (now - (total ? data.events[0][3] : now)) / 1000)));
    controls.scrub.value = String(at);
    page.classList.toggle("replay-ended", at >= total);
    HELD.forEach(function (id) {
      var section = document.getElementById(id);
      if (section) section.classList.toggle("replay-hold", at < total);
    });
  }

  function badge(el, state) {
    var about = data.states[state] || { label: state.toLowerCase(), tone: "neutral" };
    if (!el || el.dataset.replayState === state) return;
    el.dataset.replayState = state;
    el.className = el.className.replace(/\b(ok|warn|bad|info|neutral)\b/g, "").trim() + " " + about.tone;
    el.textContent = about.label;
    if (el.dataset.state !== undefined) el.dataset.state = state;
  }

  function pair(own, sub, size, format) { return size > 1 ? format(own) + " / " + format(sub) : format(own); }

  function drawNode(run, sum) {
    var item = nodes[run.id];
    if (!item) return;
    item.classList.toggle("replay-future", run.start === null);
    if (run.start === null) return;
    badge(item.querySelector(":scope > .tree-row > .tree-state"), run.state || "PENDING");
    var facts = item.querySelector(":scope > .tree-facts");
    if (facts) {
      write(facts.querySelector('[data-figure="tokens"]'), pair(run.tokens, sum.tokens, run.size, tokens) + " tok");
      write(facts.querySelector('[data-figure="cost"]'), pair(run.cost, sum.cost, run.size, usd));
      write(facts.querySelector('[data-figure="time"]'), pair(run.time, sum.time, run.size, seconds));
      write(facts.querySelector('[data-figure="tool-calls"]'), sum.tools + " tool call" + (sum.tools === 1 ? "" : "s"));
    }
    item.querySelectorAll(":scope > .tree-bars > .tree-bar").forEach(function (barEl) {
      var used = { max_tokens: sum.tokens, max_cost_usd: sum.cost, max_runtime_s: run.time }[barEl.dataset.axis];
      fill(barEl.querySelector(".meter"), used, parseFloat(barEl.dataset.limit));
    });
  }

  function fill(meter, used, limit) {
    if (!meter || !(limit > 0) || used === undefined) return;
    var fraction = used / limit;
    var mark = meter.querySelector(".meter-soft");   // the budget's own marks, or the tree's one
    var holder = meter.closest("[data-soft]");
    var soft = parseFloat((mark && mark.style.left) || (holder && holder.dataset.soft) || "80") / 100;
    var percent = Math.min(fraction, 1) * 100;
    meter.querySelector(".meter-fill").style.width = percent.toFixed(1) + "%";
    meter.setAttribute("aria-valuenow", percent.toFixed(1));
    meter.classList.remove("ok", "warn", "bad");
    meter.classList.add(fraction >= 1 ? "bad" : fraction >= soft ? "warn" : "ok");
  }

  function drawMeters(root, sum) {
    var used = { max_model_calls: sum.calls, max_tokens: sum.tokens, max_cost_usd: sum.cost, max_runtime_s: root.time };
    var shown = { max_model_calls: tokens, max_tokens: tokens, max_cost_usd: usd, max_runtime_s: seconds };
    document.querySelectorAll("#run-budget [data-meter-used]").forEach(function (label) {
      var axis = label.dataset.meterUsed;
      write(label, shown[axis](used[axis]) + " / " + label.dataset.limitText);
    });
    document.querySelectorAll("#run-budget .meter[data-axis]").forEach(function (meter) {
      fill(meter, used[meter.dataset.axis], parseFloat(meter.dataset.limit));
    });
    badge(document.querySelector("#run-head .badge.state"), root.state || "PENDING");
  }

  function drawStreams() {
    document.querySelectorAll("[data-stream-run]").forEach(function (block) {
      var run = runs.filter(function (r) { return r.id === block.dataset.streamRun; })[0];
      var pre = block.querySelector(".stream-text");
      if (!run || !pre) return;
      write(pre, run.text.length > 20000 ? "… " + run.text.slice(-20000) : run.text);
      block.hidden = !run.text;
    });
  }

  function drawWaterfall(now) {
    var panel = document.getElementById("run-waterfall");
    if (!panel) return;
    var list = panel.querySelector(".waterfall");
    var start = parseFloat(panel.dataset.start), total = parseFloat(panel.dataset.total);
    if (!list || !(total > 0)) return;
    list.setAttribute("data-cursor", "");
    list.style.setProperty("--cursor", Math.max(0, Math.min(100, (now - start) / total * 100)).toFixed(2) + "%");

    var at = (now - start) / total * 100;
    var started = {};
    runs.forEach(function (run) { if (run.start !== null) started[run.id] = true; });
    list.querySelectorAll("li[data-wf-run]").forEach(function (row) {
      row.classList.toggle("replay-future", !started[row.dataset.wfRun]);
      var span = row.querySelector(".wf-bar");   // a span grows to the cursor
      var left = parseFloat(span.dataset.left), width = parseFloat(span.dataset.width);
      var shown = Math.max(0.3, Math.min(width, at - left)).toFixed(2) + "%";
      if (span.style.width !== shown) span.style.width = shown;
    });
  }

  // -- timeline rows: the server's, fetched as the cursor reaches them ---------------------

  function cursorId() { return cursor >= 0 ? data.events[cursor][0] : 0; }
  function idAt(index) { return index >= 0 ? data.events[Math.min(data.events.length - 1, index)][0] : 0; }

  function drawRows() {
    var id = cursorId();
    // rows are fetched AHEAD events at a time, a little before the cursor needs them
    var need = idAt(cursor + (playing ? AHEAD / 2 : 0)), want = Math.max(id, idAt(cursor + AHEAD));
    if (id && id <= heldFrom) loadRows(0, want);               // back before the rows held
    else if (need > loadedUntil) loadRows(loadedUntil, want);   // ahead of them
    var changed = false;
    Array.prototype.forEach.call(timeline.children, function (row) {
      var future = parseInt(row.dataset.event, 10) > id;
      if (row.classList.contains("replay-future") !== future) { row.classList.toggle("replay-future", future); changed = true; }
    });
    if (changed) page.dispatchEvent(new CustomEvent("run:rows"));
  }

  // rows after event ``since`` up to ``until``, appended to those held (rows held cover
  // the events after heldFrom up to loadedUntil); a full answer (the server sends the
  // newest ROW_LIMIT) or a fetch from the start replaces them
  function loadRows(since, until) {
    if (fetching) return;
    fetching = fetch(liveUrl + "?since=" + since + "&until=" + until, { credentials: "same-origin" })
      .then(function (response) { if (!response.ok) throw new Error("HTTP " + response.status); return response.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").querySelector("[data-live-append]");
        var rows = fresh ? Array.prototype.slice.call(fresh.children) : [];
        var full = rows.length >= ROW_LIMIT;
        if (since === 0 || since !== loadedUntil || full) {
          timeline.replaceChildren();
          heldFrom = full ? parseInt(rows[0].dataset.event, 10) - 1 : since;
        }
        rows.forEach(function (row) { timeline.appendChild(document.importNode(row, true)); });
        while (timeline.children.length > ROW_LIMIT + AHEAD) {
          heldFrom = parseInt(timeline.firstElementChild.dataset.event, 10);
          timeline.firstElementChild.remove();
        }
        loadedUntil = until;
      })
      .catch(function () { setNote("Could not fetch the timeline for this moment; the tree and meters still replay."); })
      .then(function () { fetching = null; if (data) drawRows(); });
  }

  // -- playing ------------------------------------------------------------------------------

  function buildClock() {
    clock = [];
    var t = 0;
    data.events.forEach(function (event, i) {
      if (i) t += Math.max(MIN_GAP_MS, Math.min(MAX_GAP_MS, event[3] - data.events[i - 1][3]));
      clock.push(t);
    });
  }

  function speed() { return parseFloat(controls.speed.value) || 1; }

  function frame(time) {
    if (!playing) return;
    if (lastFrame) playClock += (time - lastFrame) * speed();
    lastFrame = time;
    var target = cursor;
    while (target + 1 < clock.length && clock[target + 1] <= playClock) target++;
    if (target !== cursor) seek(target);
    if (cursor >= data.events.length - 1) { setPlaying(false); return; }
    requestAnimationFrame(frame);
  }

  function setPlaying(on) {
    if (on && cursor >= data.events.length - 1) seek(-1);   // at the end: from the start again
    playing = on;
    controls.play.textContent = on ? "Pause" : "Play";
    controls.play.setAttribute("aria-pressed", on ? "true" : "false");
    if (on) {
      playClock = cursor >= 0 ? clock[cursor] : -MIN_GAP_MS;
      lastFrame = 0;
      requestAnimationFrame(frame);
    } else {
      remember();
    }
  }

  function step(by) {
    if (playing) setPlaying(false);
    seek(cursor + by);
    remember();
  }

  function momentUrl() {
    var url = new URL(location.href);
    url.searchParams.set("at", String(cursor + 1));
    return url;
  }

  function remember() { history.replaceState(history.state, "", momentUrl()); }

  function setNote(text) { write(controls.where, text); }

  // -- starting -----------------------------------------------------------------------------

  function start(at) {
    startButton.disabled = true;
    return fetch(bar.dataset.replayUrl, { credentials: "same-origin" })
      .then(function (response) { if (!response.ok) throw new Error("HTTP " + response.status); return response.json(); })
      .then(function (body) {
        data = body;
        if (!data.events.length) { startButton.disabled = false; startButton.textContent = "Nothing to replay"; return; }
        page.dispatchEvent(new CustomEvent("run:replay"));   // the live view stops refreshing
        page.classList.add("replaying");
        bar.hidden = false;
        startButton.hidden = true;
        controls.scrub.max = String(data.events.length);
        resetRuns();
        buildClock();
        timeline.replaceChildren();
        loadedUntil = heldFrom = 0;
        document.querySelectorAll("#run-tree [data-tree-run]").forEach(function (item) { nodes[item.dataset.treeRun] = item; });
        seek(at - 1);
        if (at <= 0) setPlaying(true); else remember();
      })
      .catch(function () {
        startButton.disabled = false;
        startButton.textContent = "Replay (could not load: try again)";
      });
  }

  controls.play.addEventListener("click", function () { setPlaying(!playing); });
  controls.step.addEventListener("click", function () { step(1); });
  controls.back.addEventListener("click", function () { step(-1); });
  controls.speed.addEventListener("change", function () { if (playing) { setPlaying(false); setPlaying(true); } });
  controls.scrub.addEventListener("input", function () {
    if (playing) setPlaying(false);
    seek(parseInt(controls.scrub.value, 10) - 1);
  });
  controls.scrub.addEventListener("change", remember);
  controls.link.addEventListener("click", function () {
    var url = momentUrl().toString();
    var done = function () { controls.link.textContent = "Link copied"; setTimeout(function () { controls.link.textContent = "Copy link"; }, 2000); };
    if (navigator.clipboard && window.isSecureContext) navigator.clipboard.writeText(url).then(done, function () { window.prompt("Copy this link:", url); });
    else window.prompt("Copy this link:", url);
  });
  startButton.addEventListener("click", function () { start(0); });
  document.addEventListener("keydown", function (event) {
    if (!data || event.ctrlKey || event.metaKey || event.altKey) return;
    var target = event.target;
    if (target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT|BUTTON|SUMMARY|A)$/.test(target.tagName))) return;
    var actions = { " ": function () { setPlaying(!playing); }, ".": function () { step(1); }, ",": function () { step(-1); } };
    if (!actions[event.key]) return;
    event.preventDefault();
    actions[event.key]();
  });

  // offered once the run has ended: on a page opened on a finished run, or when the live
  // view shows it ending
  function offer() {
    var state = document.querySelector("#run-head [data-state]");
    var ended = !!state && !!TERMINAL[state.dataset.state];
    if (!data) startButton.hidden = !ended;
    return ended;
  }
  page.addEventListener("run:refreshed", offer);
  var at = parseInt(new URLSearchParams(location.search).get("at") || "", 10);
  if (offer() && at > 0) start(at);
})();
