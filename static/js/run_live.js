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
 *    a busy tree watched by many people costs the server far less than a frame each;
 *  - the timeline (every run of the tree, in the order events were stored) is filtered in
 *    place: by the run selected in the tree (or its subtree), by event type, errors only,
 *    rows appended live included; it follows the newest event until the person scrolls
 *    up, and offers "jump to latest";
 *  - the tree is patched node by node: the refresh sends only the runs with new events
 *    (and their ancestors, whose roll-ups they change), each put in place or inserted
 *    under its parent, so a tree of 1,000 runs is not re-rendered per event; subtrees
 *    fold and unfold (big ones start folded unless something in them waits or failed);
 *  - "next waiting" and "next error" jump through the timeline;
 *  - keys: j/k events, [ and ] runs of the tree, o fold the selected run, a/e the next
 *    approval waiting / error, c cancel the selected subtree (the confirm step opens),
 *    f follow, ? the list of keys, Esc every run again;
 *  - while run_replay.js replays the run ("run:replay" on the page), refreshes stop, and
 *    the rows it reveals ("run:rows") are filtered and followed like live ones.
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
  // while events stream in, at most a refresh this often: each one re-renders the changed
  // parts of the page, and a person reads no faster (bench_run_page.py: with 100 events/s
  // the page's main thread stays under 30 % busy)
  var MIN_REFRESH_GAP_MS = 1000;
  var TIMELINE_ROWS = 500;   // the rows kept on the page, as the snapshot shows (the API has all)
  var MAX_BACKOFF_MS = 15000;
  var PING_EVERY_MS = 25000;
  // 4404 also for a run this user may not watch: the server, like the API's 404, does
  // not tell the two apart
  var FINAL_CLOSE = { 4401: "Signed out: reload the page to sign in again.",
                      4404: "This run no longer exists, or you may not watch it." };

  var LATE_WINDOW = 50;      // event ids re-read on each refresh (see refresh())
  var cursors = {};          // run id -> last seq received (or rendered in the snapshot)
  try { cursors = JSON.parse(page.dataset.cursors || "{}"); } catch (error) { cursors = {}; }
  var snapshotCursors = Object.assign({}, cursors);
  var MAX_URL_CHARS = 6000;  // servers refuse a websocket handshake line much over 8 KB
  var pendingText = {};      // run id -> [{seq, delta, newTurn}] the page may not show yet
  var turnEnded = {};        // run id -> a model call closed its last turn (next text: new paragraph)
  var streamsArrived = false;   // the last refresh brought the output areas
  var noArea = {};           // run id -> the page shows no output of it (only the latest talkers')
  var socket = null;
  var attempts = 0;
  var pingTimer = null;
  var refreshTimer = null;
  var refreshing = false;
  var refreshAgain = false;
  var lastRefreshAt = 0;
  var wantStreams = false;
  var streamsInFlight = false;
  var wantWholeTree = false;   // a patch could not be placed: ask for the whole tree once
  var replaying = false;
  var folded = {};             // run id -> folded (true) or unfolded (false) by the person

  function setStatus(status, text) {
    if (replaying) return;   // the badge says "Replay" until the page is left
    // connected to a run that has ended: nothing more is coming, so it does not say "Live"
    var ended = status === "live" && runEnded();
    statusEl.dataset.status = status;
    if (ended) statusEl.dataset.ended = "1"; else delete statusEl.dataset.ended;
    statusEl.textContent = ended ? "Finished" : text;
    if (reloadLink) reloadLink.hidden = status === "live" || status === "connecting";
  }

  var ENDED_STATES = ["COMPLETE", "FAILED", "TIMEOUT", "REJECTED", "CANCELLED", "RETURNED"];
  function runEnded() {
    var badge = document.querySelector("#run-head h1 .badge.state");
    return !!badge && ENDED_STATES.indexOf(badge.dataset.state) >= 0;
  }

  // -- the socket -------------------------------------------------------------------

  // the page has every event up to the snapshot's newest id (less a few: see LATE_WINDOW)
  // and, per run, up to its cursor; the URL names only the cursors that moved since the
  // snapshot, as many as fit (the server sends again what the rest lack; seqs drop repeats)
  function socketUrl() {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var params = ["batch=1", "after=" + (cursors[runId] || 0)];
    var since = parseInt(page.dataset.since || "0", 10) - LATE_WINDOW;
    if (since > 0) params.push("since=" + since);
    var length = wsPath.length + 40;
    Object.keys(cursors).forEach(function (id) {
      if (id === runId || cursors[id] <= (snapshotCursors[id] || 0)) return;
      var param = "after." + encodeURIComponent(id) + "=" + cursors[id];
      length += param.length + 1;
      if (length < MAX_URL_CHARS) params.push(param);
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
    if (applyText(id)) return;
    if (noArea[id]) { pendingText[id] = []; return; }
    wantStreams = true;      // a run without an output area yet: ask the server for it
    scheduleRefresh();
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
    if (refreshTimer || replaying) return;
    var wait = Math.max(REFRESH_DELAY_MS, lastRefreshAt + MIN_REFRESH_GAP_MS - Date.now());
    refreshTimer = setTimeout(refresh, wait);
  }

  function refresh() {
    refreshTimer = null;
    if (refreshing) { refreshAgain = true; return; }
    refreshing = true;
    lastRefreshAt = Date.now();
    streamsInFlight = wantStreams;
    wantStreams = false;
    var timeline = document.getElementById("run-timeline");
    // a little before the last event id shown: on PostgreSQL an event can commit after one
    // with a higher id (two writers at once), and would otherwise be skipped until a reload
    var since = Math.max(0, parseInt(timeline.dataset.after || "0", 10) - LATE_WINDOW);
    var url = liveUrl + "?since=" + since +
              (streamsInFlight ? "&streams=1" : "") + (wantWholeTree ? "&tree=1" : "");
    var waterfall = document.getElementById("run-waterfall");
    if (waterfall) url += "&wf=" + encodeURIComponent(waterfall.dataset.liveKey || "");
    wantWholeTree = false;
    fetch(url, { credentials: "same-origin", headers: { "HX-Request": "true" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(function (html) {
        applyRefresh(html);
        if (statusEl.dataset.status === "live") setStatus("live", "Live");   // the run may have ended
      })
      .catch(function () {
        if (streamsInFlight) wantStreams = true;
        // with the socket down, its reconnection ("synced") refreshes instead
        if (socket) refreshAgain = true;
      })
      .then(function () {
        var hadStreams = streamsArrived;
        streamsArrived = false;
        refreshing = false;
        streamsInFlight = false;
        Object.keys(pendingText).forEach(function (id) {
          if (!applyText(id) && hadStreams) { noArea[id] = true; pendingText[id] = []; }
        });
        if (refreshAgain) {
          refreshAgain = false;
          setTimeout(scheduleRefresh, 500);
        }
      });
  }

  function applyRefresh(html) {
    if (replaying) return;
    var fresh = new DOMParser().parseFromString(html, "text/html");
    streamsArrived = !!fresh.getElementById("run-streams");
    fresh.querySelectorAll("[data-live-section]").forEach(function (section) {
      var current = document.getElementById(section.id);
      if (!current) return;
      // sections holding a form (the controls, the approvals) change only when their key
      // does, so a message being typed is not wiped by an unrelated event (and a big one,
      // the waterfall, is not compared node by node)
      if (section.dataset.liveKey !== undefined && section.dataset.liveKey === current.dataset.liveKey) return;
      keepTokens(current, section);
      if (current.isEqualNode(section)) return;
      var kept = keptState(current);
      var replacement = document.importNode(section, true);
      current.replaceWith(replacement);
      restoreState(replacement, kept);
      if (section.id === "run-tree") treeChanged();
    });
    var patch = fresh.querySelector("[data-live-tree]");
    if (patch) patchTree(patch);
    page.dispatchEvent(new CustomEvent("run:refreshed"));   // (run_replay.js: has the run ended?)
    var rows = fresh.querySelector("[data-live-append]");
    if (!rows) return;
    var list = document.getElementById(rows.dataset.liveAppend);
    var added = false;
    Array.prototype.slice.call(rows.children).forEach(function (row) {
      var id = parseInt(row.dataset.event, 10);
      if (list.querySelector('[data-event="' + id + '"]')) return;   // shown already
      var node = document.importNode(row, true);
      var later = null;   // a late commit goes in its place, by id
      for (var next = list.lastElementChild; next && parseInt(next.dataset.event, 10) > id; next = next.previousElementSibling) {
        later = next;
      }
      list.insertBefore(node, later);
      showIfMatching(node);
      added = true;
    });
    list.dataset.after = String(Math.max(parseInt(list.dataset.after || "0", 10),
                                         parseInt(rows.dataset.after || "0", 10)));
    while (list.children.length > TIMELINE_ROWS) {   // the oldest go (the API keeps them)
      if (list.firstElementChild === currentRow) currentRow = null;
      list.firstElementChild.remove();
    }
    var empty = document.getElementById("timeline-empty");
    if (empty && list.children.length) empty.remove();
    if (added) {
      noteEmptyFilter();
      if (following) scrollToLatest(); else jumpButton.hidden = false;
    }
  }

  // -- the tree, node by node -----------------------------------------------------------

  function ownParts(item) {   // what a node shows of itself: not its children, not an open box
    return Array.prototype.filter.call(item.children, function (part) {
      return !part.classList.contains("tree-children") && !part.classList.contains("node-box");
    });
  }

  function sameParts(mine, theirs) {
    if (mine.length !== theirs.length) return false;
    for (var i = 0; i < mine.length; i++) {
      keepTokens(mine[i], theirs[i]);
      if (!mine[i].isEqualNode(theirs[i])) return false;
    }
    return true;
  }

  function patchNode(item, fresh) {
    ["data-state", "data-running", "data-below"].forEach(function (name) {
      if (fresh.hasAttribute(name)) item.setAttribute(name, fresh.getAttribute(name));
      else item.removeAttribute(name);
    });
    var theirs = ownParts(fresh);
    if (sameParts(ownParts(item), theirs)) return;
    var box = item.querySelector(":scope > .node-box");
    var before = box || item.querySelector(":scope > .tree-children");
    ownParts(item).forEach(function (part) { part.remove(); });
    theirs.forEach(function (part) {
      var node = document.importNode(part, true);
      if (part.classList.contains("tree-planned")) item.appendChild(node);
      else item.insertBefore(node, before);
    });
    // a box left open on a run that has ended (nothing to cancel or message now) closes
    if (box && !item.hasAttribute("data-running")) box.remove();
    syncToggle(item);
  }

  // -- a node's cancel and message boxes: one copy of each on the page, opened on a node -----

  function openBox(item, kind) {
    var template = document.getElementById("node-" + kind + "-box");
    if (!item || !template || item.dataset.running !== "1") return null;
    var open = item.querySelector(":scope > .node-box");
    if (open && open.dataset.box === kind) return open;
    if (open) open.remove();
    var box = template.content.firstElementChild.cloneNode(true);
    var id = item.dataset.treeRun;
    var link = item.querySelector(":scope > .tree-row > a[href]");
    var name = link ? link.textContent : id.slice(0, 8);
    var below = parseInt(item.dataset.below || "0", 10);
    box.querySelectorAll("[data-slot=name]").forEach(function (slot) { slot.textContent = name; });
    var belowSlot = box.querySelector("[data-slot=below]");
    if (belowSlot) belowSlot.textContent = below ? " and the " + below + " subagent" + (below === 1 ? "" : "s") + " under it" : "";
    var parentSlot = box.querySelector("[data-slot=parent]");
    if (parentSlot && item.dataset.root === "1") parentSlot.remove();
    var form = box.querySelector("form");
    form.action = form.dataset.action.replace("RUN_ID", encodeURIComponent(id));
    var area = box.querySelector("textarea");
    if (area) {
      area.id = "message-" + id;
      box.querySelector("label").htmlFor = area.id;
    }
    var yes = box.querySelector("[data-confirm-cancel]");
    if (yes) yes.textContent = "Yes, cancel " + name;
    item.insertBefore(box, item.querySelector(":scope > .tree-children"));
    (area || yes || box).focus();
    return box;
  }

  function insertNode(fresh) {
    var parent = treeItem(fresh.dataset.parent);
    var list = parent && parent.querySelector(":scope > .tree-children");
    if (!list) return false;
    var item = document.importNode(fresh, true);
    item.removeAttribute("data-parent");
    item.removeAttribute("data-index");
    var children = document.createElement("ul");
    children.className = "tree-children";
    children.id = "kids-" + fresh.dataset.treeRun;
    var planned = item.querySelector(":scope > .tree-planned");
    item.insertBefore(children, planned);
    list.insertBefore(item, list.children[parseInt(fresh.dataset.index, 10)] || null);
    return true;
  }

  function patchTree(patch) {
    // the tree's own words (its count, its empty note) come with the patch, by id
    patch.querySelectorAll(":scope > [id]").forEach(function (fresh) {
      var mine = document.getElementById(fresh.id);
      if (mine && !mine.isEqualNode(fresh)) mine.replaceWith(document.importNode(fresh, true));
    });
    var placed = true;
    Array.prototype.forEach.call(patch.querySelectorAll(":scope > li[data-tree-run]"), function (fresh) {
      var item = treeItem(fresh.dataset.treeRun);
      if (item) patchNode(item, fresh);
      else if (!insertNode(fresh)) placed = false;
    });
    if (!placed) { wantWholeTree = true; scheduleRefresh(); }
    treeChanged();
  }

  // -- folding subtrees -------------------------------------------------------------------

  function setFolded(item, fold) {
    if (!item || !item.querySelector(":scope > .tree-children > li")) return;
    if (fold) item.setAttribute("data-collapsed", "1"); else item.removeAttribute("data-collapsed");
    folded[item.dataset.treeRun] = fold;
    syncToggle(item);
  }

  function syncToggle(item) {
    var toggle = item.querySelector(":scope > .tree-row > .tree-toggle");
    if (toggle) toggle.setAttribute("aria-expanded", item.hasAttribute("data-collapsed") ? "false" : "true");
  }

  // a node shown by a selection (a key, the waterfall) unfolds the subtrees it is in
  function reveal(item) {
    for (var up = item.parentElement && item.parentElement.closest(".tree-node"); up;
         up = up.parentElement && up.parentElement.closest(".tree-node")) {
      if (up.hasAttribute("data-collapsed")) setFolded(up, false);
    }
  }

  function reapplyFolds() {   // the whole tree was re-rendered: the person's folds stay
    Object.keys(folded).forEach(function (id) {
      var item = treeItem(id);
      if (!item) return;
      if (folded[id]) item.setAttribute("data-collapsed", "1"); else item.removeAttribute("data-collapsed");
      syncToggle(item);
    });
  }

  // every render masks the CSRF token afresh; the page's tokens stay valid, so keeping
  // them spares replacing a section (and a click on it) for no change a person sees
  function keepTokens(current, fresh) {
    var mine = current.querySelectorAll("input[name=csrfmiddlewaretoken]");
    var theirs = fresh.querySelectorAll("input[name=csrfmiddlewaretoken]");
    if (mine.length !== theirs.length) return;
    for (var i = 0; i < mine.length; i++) theirs[i].setAttribute("value", mine[i].value);
  }

  // what a person was typing in a section, and the focused control, survive the section
  // being replaced by a fresh render
  function keptState(section) {
    var state = { values: {}, focus: null };
    section.querySelectorAll("textarea[id]").forEach(function (area) {
      if (area.value) state.values[area.id] = area.value;
    });
    var active = document.activeElement;
    if (active && active.id && section.contains(active)) state.focus = active.id;
    return state;
  }

  function restoreState(section, state) {
    Object.keys(state.values).forEach(function (id) {
      var area = document.getElementById(id);
      if (area && section.contains(area)) area.value = state.values[id];
    });
    var target = state.focus ? document.getElementById(state.focus) : null;
    if (target && section.contains(target)) target.focus();
  }

  // -- the timeline: filters, follow-tail, keys ---------------------------------------------

  var filterForm = document.getElementById("timeline-filters");
  var scroller = document.getElementById("timeline-scroll");
  var jumpButton = document.getElementById("jump-latest");
  var followButton = document.getElementById("follow-toggle");
  var keysButton = document.getElementById("keys-toggle");
  var keysHelp = document.getElementById("keys-help");
  var nodeBox = document.getElementById("filter-node");
  var nodeInput = document.getElementById("filter-node-id");
  var subtreeBox = document.getElementById("filter-subtree");
  var serverFiltered = filterForm && filterForm.dataset.filtered === "1";
  var filter = { node: "", subtree: true, groups: {}, errorsOnly: false, runs: null };
  var following = true;
  var currentRow = null;

  function readFilter() {
    filter.node = nodeInput && !nodeInput.disabled ? nodeInput.value : "";
    filter.subtree = !subtreeBox || subtreeBox.checked;
    filter.groups = {};
    filterForm.querySelectorAll("input[name=types]").forEach(function (box) {
      filter.groups[box.value] = box.checked;
    });
    var errors = filterForm.querySelector("input[name=errors]");
    filter.errorsOnly = !!errors && errors.checked;
    filter.runs = selectedRuns();
  }

  // the runs whose events show: the selected one, with its subtree when asked
  function selectedRuns() {
    if (!filter.node) return null;
    var runs = {};
    runs[filter.node] = true;
    var item = treeItem(filter.node);
    if (item && filter.subtree) {
      item.querySelectorAll("[data-tree-run]").forEach(function (child) { runs[child.dataset.treeRun] = true; });
    }
    return runs;
  }

  function treeItem(id) {
    return id ? document.querySelector('#run-tree [data-tree-run="' + CSS.escape(id) + '"]') : null;
  }

  function matches(row) {
    if (filter.runs && !filter.runs[row.dataset.run]) return false;
    if (filter.errorsOnly && row.dataset.error !== "1") return false;
    return filter.groups[row.dataset.group] !== false;
  }

  function showIfMatching(row) { row.hidden = !matches(row); }

  function applyFilter() {
    document.querySelectorAll("#run-timeline > li").forEach(showIfMatching);
    noteEmptyFilter();
    markSelected();
    if (following) scrollToLatest();
  }

  function noteEmptyFilter() {
    var note = document.getElementById("timeline-none-shown");
    if (!note) return;
    var rows = document.querySelectorAll("#run-timeline > li");
    var shown = document.querySelectorAll("#run-timeline > li:not([hidden]):not(.replay-future)");
    note.hidden = !rows.length || shown.length > 0;
  }

  function filterQuery() {
    var params = new URLSearchParams();
    if (filter.node) {
      params.set("node", filter.node);
      if (filter.subtree) params.set("subtree", "1");
    }
    var names = Object.keys(filter.groups);
    var on = names.filter(function (name) { return filter.groups[name]; });
    if (on.length !== names.length) params.set("types", on.join(","));
    if (filter.errorsOnly) params.set("errors", "1");
    var query = params.toString();
    return location.pathname + (query ? "?" + query : "");
  }

  function filterChanged() {
    readFilter();
    var url = filterQuery();
    // a timeline the server filtered holds only what matched: widen it by asking again
    if (serverFiltered) { location.assign(url); return; }
    history.replaceState(history.state, "", url);
    applyFilter();
  }

  function selectNode(id) {
    var item = id ? treeItem(id) : null;
    if (!nodeInput) return;
    nodeInput.value = item ? id : "";
    nodeInput.disabled = !item;
    nodeBox.hidden = !item;
    if (item) {
      reveal(item);
      var link = item.querySelector(".tree-row > a[href]");
      document.getElementById("filter-node-name").textContent = link ? link.textContent : id.slice(0, 8);
    }
    filterChanged();
  }

  function markSelected() {
    document.querySelectorAll("#run-tree .tree-node.selected").forEach(function (item) {
      item.classList.remove("selected");
      item.removeAttribute("aria-selected");
    });
    var item = filter.node ? treeItem(filter.node) : null;
    if (item) {
      item.classList.add("selected");
      item.setAttribute("aria-selected", "true");
    }
  }

  function treeChanged() {
    reapplyFolds();
    filter.runs = selectedRuns();   // the subtree may have grown
    applyFilter();
  }

  function atBottom() {
    return scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 24;
  }

  function setFollowing(on) {
    following = on;
    followButton.setAttribute("aria-pressed", on ? "true" : "false");
    followButton.textContent = on ? "Following" : "Follow";
    if (on) { scrollToLatest(); jumpButton.hidden = true; } else if (!atBottom()) jumpButton.hidden = false;
  }

  function scrollToLatest() {
    scroller.scrollTop = scroller.scrollHeight;
  }

  function visibleRows() {
    return Array.prototype.slice.call(document.querySelectorAll("#run-timeline > li:not([hidden]):not(.replay-future)"));
  }

  function setCurrentRow(row) {
    if (currentRow) currentRow.classList.remove("kbd-current");
    currentRow = row;
    currentRow.classList.add("kbd-current");
  }

  function moveRow(step) {
    var rows = visibleRows();
    if (!rows.length) return;
    var index = rows.indexOf(currentRow);
    index = index < 0 ? (step > 0 ? 0 : rows.length - 1) : Math.max(0, Math.min(rows.length - 1, index + step));
    setCurrentRow(rows[index]);
    // reading back up stops following; reaching the newest again resumes it
    setFollowing(index === rows.length - 1 && step > 0);
    currentRow.scrollIntoView({ block: "nearest" });
  }

  // the next row (after the current one, round to the top) that is an error, or an
  // approval still waiting (the approvals section, refreshed live, says which wait)
  function jumpTo(kind) {
    var waiting = {};
    document.querySelectorAll("#run-approvals [data-approval-id][data-pending]").forEach(function (item) {
      waiting[item.dataset.approvalId] = item;
    });
    var rows = visibleRows().filter(function (row) {
      return kind === "error" ? row.dataset.error === "1" : !!waiting[row.dataset.approval];
    });
    if (!rows.length) {
      var first = Object.keys(waiting).map(function (id) { return waiting[id]; })[0];
      if (kind === "approval" && first) {   // waiting, but not in the timeline as filtered
        first.scrollIntoView({ block: "center" });
        setStatusNote("That approval is not in the timeline as it is filtered; it is in Approvals above.");
      } else {
        setStatusNote(kind === "error" ? "No error in the timeline as it is filtered." : "Nothing waits for a person.");
      }
      return;
    }
    var index = rows.indexOf(currentRow);
    var next = rows[(index + 1) % rows.length];
    if (index < 0 && currentRow) {   // the current row is not one of them: the next one below it
      next = rows.filter(function (row) {
        return currentRow.compareDocumentPosition(row) & Node.DOCUMENT_POSITION_FOLLOWING;
      })[0] || rows[0];
    }
    setCurrentRow(next);
    setFollowing(false);
    next.scrollIntoView({ block: "center" });
    setStatusNote("");
  }

  function moveNode(step) {
    var items = Array.prototype.filter.call(document.querySelectorAll("#run-tree [data-tree-run]"), function (item) {
      return item.offsetParent !== null;   // not inside a folded subtree
    });
    if (!items.length) return;
    var index = items.indexOf(filter.node ? treeItem(filter.node) : null);
    index = index < 0 ? (step > 0 ? 0 : items.length - 1) : Math.max(0, Math.min(items.length - 1, index + step));
    selectNode(items[index].dataset.treeRun);
    items[index].scrollIntoView({ block: "nearest" });
  }

  function cancelSelected() {
    var item = treeItem(filter.node || runId);
    if (!item || !openBox(item, "cancel")) {
      setStatusNote(item && item.dataset.running !== "1" ? "That run has ended: there is nothing to cancel."
                                                          : "You cannot cancel that run.");
    }
  }

  function setStatusNote(text) {
    var note = document.getElementById("keys-note");
    if (!note) {
      note = document.createElement("p");
      note.id = "keys-note";
      note.className = "small muted";
      note.setAttribute("role", "status");
      keysHelp.parentNode.insertBefore(note, keysHelp);
    }
    note.textContent = text;
  }

  function toggleKeys(show) {
    keysHelp.hidden = show === undefined ? !keysHelp.hidden : !show;
    keysButton.setAttribute("aria-expanded", keysHelp.hidden ? "false" : "true");
  }

  function onKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var target = event.target;
    // keys are for the page, not for a field being typed in (a focused checkbox is fine)
    var typing = target && (target.isContentEditable || target.tagName === "TEXTAREA" || target.tagName === "SELECT" ||
                            (target.tagName === "INPUT" && !/^(checkbox|radio|button|submit|reset)$/.test(target.type)));
    if (typing) return;
    var actions = { j: function () { moveRow(1); }, k: function () { moveRow(-1); },
                    "]": function () { moveNode(1); }, "[": function () { moveNode(-1); },
                    c: cancelSelected, f: function () { setFollowing(!following); },
                    o: function () { var item = treeItem(filter.node || runId); setFolded(item, !(item && item.hasAttribute("data-collapsed"))); },
                    a: function () { jumpTo("approval"); }, e: function () { jumpTo("error"); },
                    "?": function () { toggleKeys(); },
                    Escape: function () { if (!keysHelp.hidden) toggleKeys(false); else if (filter.node) selectNode(""); } };
    var action = actions[event.key];
    if (!action) return;
    event.preventDefault();
    action();
  }

  function setUpTimeline() {
    if (!filterForm || !scroller) return;
    document.getElementById("filter-apply").hidden = true;   // changes apply at once
    followButton.hidden = false;
    keysButton.hidden = false;
    page.classList.add("scripted");   // the tree's fold buttons work
    var treeAll = document.querySelector("#run-tree .tree-all");
    if (treeAll && document.querySelector("#run-tree .tree-toggle")) treeAll.hidden = false;
    var nextApproval = document.getElementById("next-approval");
    var nextError = document.getElementById("next-error");
    nextApproval.hidden = nextError.hidden = false;
    nextApproval.addEventListener("click", function () { jumpTo("approval"); });
    nextError.addEventListener("click", function () { jumpTo("error"); });
    readFilter();
    applyFilter();
    scrollToLatest();
    filterForm.addEventListener("change", filterChanged);
    filterForm.addEventListener("submit", function (event) { event.preventDefault(); filterChanged(); });
    document.getElementById("filter-node-clear").addEventListener("click", function (event) {
      if (serverFiltered) return;   // the link reloads the page unfiltered
      event.preventDefault();
      selectNode("");
    });
    // the tree is replaced as it changes: listen on the page, not on its rows
    page.addEventListener("click", function (event) {
      var action = event.target.closest("[data-node-action]");
      if (action) { openBox(action.closest(".tree-node"), action.dataset.nodeAction); return; }
      var close = event.target.closest("[data-box-close]");
      if (close) {
        var holder = close.closest(".tree-node");
        close.closest(".node-box").remove();
        var again = holder && holder.querySelector(":scope > .tree-actions button");
        if (again) again.focus();
        return;
      }
      var toggle = event.target.closest(".tree-toggle");
      if (toggle) { var item = toggle.closest(".tree-node"); setFolded(item, !item.hasAttribute("data-collapsed")); return; }
      var all = event.target.closest("[data-tree-all]");
      if (all) {
        document.querySelectorAll("#run-tree .tree-node").forEach(function (item) {
          if (!item.classList.contains("current")) setFolded(item, all.dataset.treeAll === "close");
        });
        return;
      }
      var select = event.target.closest("[data-select-run]");
      if (!select) return;
      event.preventDefault();
      selectNode(select.dataset.selectRun === filter.node ? "" : select.dataset.selectRun);
    });
    scroller.addEventListener("scroll", function () {
      if (atBottom()) { if (!following) setFollowing(true); }
      else if (following) setFollowing(false);
    }, { passive: true });
    jumpButton.addEventListener("click", function () { setFollowing(true); });
    followButton.addEventListener("click", function () { setFollowing(!following); });
    keysButton.addEventListener("click", function () { toggleKeys(); });
    document.addEventListener("keydown", onKey);
    page.addEventListener("run:replay", function () {
      setStatus("replay", "Replay");
      replaying = true;
    });
    page.addEventListener("run:rows", function () {
      applyFilter();
      if (!following) jumpButton.hidden = false;
    });
  }

  window.addEventListener("pagehide", function () {
    if (socket) { var ws = socket; socket = null; ws.close(1000); }
  });
  window.addEventListener("pageshow", function (event) {
    if (event.persisted && !socket) connect();   // back from the back/forward cache
  });
  setUpTimeline();
  connect();
  if (window.performance && performance.mark) performance.mark("run-page-ready");   // (bench_run_page.py)
})();
