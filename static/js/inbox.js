/* The inbox page, live: new items slide in and decided ones leave without a reload, the
 * time left counts down, keys move and decide, and a notification tells a person in
 * another tab that something waits.
 *
 * Without this script the page is a complete snapshot whose forms post and redirect.
 * With it:
 *  - it follows the nav badge's socket (inbox_count.js passes every /ws/inbox/ frame on
 *    as an `inbox:frame` event): for `approval.created` it asks the server for the item
 *    rendered for this person and these filters (/inbox/<id>/item/?<filters>; 204 when
 *    it does not match) and puts it under its run's group; `approval.decided`,
 *    `approval.expired` and `approval.cancelled` say who decided and take the item away;
 *    after a reconnect (or a change before the socket opened) the list is re-fetched;
 *  - `.time-left[data-expires-at]` counts down; at zero the item's forms are disabled;
 *  - keys: j/k move, a approve, r reject (focus the reason), e edit the arguments,
 *    Enter answer, x select for a batch decision, ? show the keys, Esc leave a field;
 *  - batch bars appear in a group once two of its items can be decided together;
 *  - "Notify me" asks for permission to show browser notifications while the tab is
 *    hidden.
 */
(function () {
  "use strict";

  if (!document.getElementById("inbox-pending") || !window.fetch) return;

  var LEAVE_AFTER_MS = 2500;       // time to read "approved by …" before the item goes
  var OWN_DECISION_LEAVE_MS = 4000;
  var LEAVING = { "approval.decided": true, "approval.expired": true, "approval.cancelled": true };

  var liveStatus = document.getElementById("inbox-live");
  var keysDialog = document.getElementById("inbox-keys");
  var keysButton = document.getElementById("show-keys");
  var notifyButton = document.getElementById("notify-me");
  var current = null;
  var gone = {};   // ids already taken off the count (the socket and an htmx swap both report a decision)

  function countGone(id) {
    if (gone[id]) return;
    gone[id] = true;
    setTotal(-1);
  }

  function pending() { return document.getElementById("inbox-pending"); }
  function groupsBox() { return document.getElementById("inbox-groups"); }
  function items() { return Array.prototype.slice.call(document.querySelectorAll("#inbox-groups .inbox-item")); }
  function itemById(id) { return document.getElementById("approval-" + id); }

  // -- live list ----------------------------------------------------------------------

  function setStatus(status) {
    if (!liveStatus) return;
    liveStatus.dataset.status = status;
    liveStatus.textContent = { live: "Live", reconnecting: "Reconnecting…", offline: "Offline" }[status] || status;
  }

  function setTotal(delta) {
    var badge = document.getElementById("pending-total");
    if (!badge) return;
    var total = Math.max(0, (parseInt(badge.dataset.count, 10) || 0) + delta);
    badge.dataset.count = String(total);
    badge.textContent = String(total);
    badge.hidden = total === 0;
  }

  function refreshEmptyState() {
    var empty = document.getElementById("inbox-empty");
    if (empty) empty.hidden = items().length > 0;
    var section = pending();
    section.classList.toggle("pending", items().length > 0);
  }

  // Where a new item may appear: the page it would sort onto is the one shown.
  function acceptsArrivals() {
    var section = pending();
    var page = parseInt(section.dataset.page, 10) || 1;
    var pages = parseInt(section.dataset.pages, 10) || 1;
    return section.dataset.order === "newest" ? page === 1 : page === pages;
  }

  function arrive(approval) {
    if (!approval || itemById(approval.id) || !acceptsArrivals()) {
      if (approval && !itemById(approval.id)) setTotal(1);
      return;
    }
    var query = pending().dataset.query;
    var url = "/inbox/" + encodeURIComponent(approval.id) + "/item/" + (query ? "?" + query : "");
    fetch(url, { headers: { "HX-Request": "true" }, credentials: "same-origin" })
      .then(function (response) { return response.status === 200 ? response.text() : ""; })
      .then(function (html) {
        if (!html || itemById(approval.id)) return;
        var holder = document.createElement("div");
        holder.innerHTML = html;
        var group = holder.querySelector(".inbox-group");
        var item = holder.querySelector(".inbox-item");
        if (!group || !item) return;
        var newest = pending().dataset.order === "newest";
        var existing = groupsBox().querySelector('.inbox-group[data-root-run="' + CSS.escape(group.dataset.rootRun) + '"]');
        if (existing) {
          var list = existing.querySelector(".approval-list");
          if (newest) list.insertBefore(item, list.firstChild); else list.appendChild(item);
          group = existing;
        } else if (newest) {
          groupsBox().insertBefore(group, groupsBox().firstChild);
        } else {
          groupsBox().appendChild(group);
        }
        item.classList.add("arriving");
        if (window.htmx) window.htmx.process(group);
        setTotal(1);
        refreshEmptyState();
        syncBatchBar(group);
        tick();
        notify(approval);
      })
      .catch(function () { /* the next reconnect re-fetches the list */ });
  }

  function decidedNote(approval, type) {
    if (type === "approval.expired") return "Expired: nobody decided in time, so its run timed out.";
    if (type === "approval.cancelled") return "Cancelled: its run ended before anyone decided.";
    var who = approval.decided_by ? " by " + approval.decided_by : "";
    var when = "";
    if (approval.decided_at) {
      var at = new Date(approval.decided_at);
      if (!isNaN(at)) when = " at " + at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
    }
    return (approval.status || "Decided").replace(/^./, function (c) { return c.toUpperCase(); }) + who + when + ".";
  }

  function leave(approval, type) {
    var item = approval && itemById(approval.id);
    if (!item) {
      if (approval) countGone(approval.id);  // on another page of the list
      return;
    }
    if (item.dataset.leaving) return;
    item.dataset.leaving = "1";
    if (item.dataset.pending === "1") {
      // someone else decided it (or it ran out of time): say so, then let it go
      var box = item.querySelector("[data-decide]");
      var note = document.createElement("p");
      note.className = "notice warn left-note";
      note.setAttribute("role", "status");
      note.textContent = decidedNote(approval, type) + " It leaves the inbox.";
      if (box) box.replaceWith(note); else item.appendChild(note);
      var pick = item.querySelector(".batch-pick");
      if (pick) pick.remove();
    }
    countGone(approval.id);
    window.setTimeout(function () { removeItem(item); }, LEAVE_AFTER_MS);
  }

  function focusLost() {
    var active = document.activeElement;
    return !active || active === document.body;
  }

  function removeItem(item) {
    if (!item.isConnected) return;
    var next = current === item ? neighbour(item, 1) || neighbour(item, -1) : null;
    item.classList.add("leaving");
    window.setTimeout(function () {
      var group = item.closest(".inbox-group");
      var hadFocus = item.contains(document.activeElement);
      item.remove();
      if (group && !group.querySelector(".inbox-item")) group.remove();
      else if (group) syncBatchBar(group);
      if (current === item) select(next, hadFocus || focusLost());
      refreshEmptyState();
    }, 450);
  }

  function refreshList() {
    var url = "/inbox/" + (pending().dataset.query ? "?" + pending().dataset.query : "");
    var page = pending().dataset.page;
    if (page && page !== "1") url += (url.indexOf("?") < 0 ? "?" : "&") + "page=" + page;
    var focusedId = current && current.dataset.approvalId;
    fetch(url, { headers: { "HX-Request": "true" }, credentials: "same-origin" })
      .then(function (response) { return response.ok ? response.text() : ""; })
      .then(function (html) {
        if (!html) return;
        var holder = document.createElement("div");
        holder.innerHTML = html;
        var fresh = holder.querySelector("#inbox-pending");
        if (!fresh) return;
        pending().replaceWith(fresh);
        if (window.htmx) window.htmx.process(fresh);
        afterListChange();
        if (focusedId && itemById(focusedId)) select(itemById(focusedId), false);
      })
      .catch(function () { /* keep what is shown */ });
  }

  document.addEventListener("inbox:socket", function (event) { setStatus(event.detail.status); });
  document.addEventListener("inbox:frame", function (event) {
    var frame = event.detail;
    if (frame.type === "inbox.synced") {
      if (frame.missed) refreshList();
    } else if (frame.type === "approval.created") {
      arrive(frame.approval);
    } else if (LEAVING[frame.type]) {
      leave(frame.approval, frame.type);
    }
  });

  // htmx swapped an item (decided here, or refused with the reason) or the whole list
  document.addEventListener("htmx:afterSwap", function (event) {
    var target = event.detail.target;
    if (target && target.id === "inbox-pending") { afterListChange(); return; }
    var swappedId = (target && target.dataset && target.dataset.approvalId) ||
      (current && !current.isConnected ? current.dataset.approvalId : null);
    var replaced = swappedId ? itemById(swappedId) : null;
    // keep the key cursor on the swapped item, and the focus when it went with the old one
    // (a decision made with Tab and Enter left the keyboard on the page's body)
    if (replaced) select(replaced, focusLost());
    document.querySelectorAll('#inbox-groups .inbox-item[data-pending="0"]').forEach(function (item) {
      if (item.dataset.leaving || item.querySelector(".notice.bad")) return;   // not decided: stay to say why
      item.dataset.leaving = "1";
      countGone(item.dataset.approvalId);
      window.setTimeout(function () { removeItem(item); }, OWN_DECISION_LEAVE_MS);
    });
  });

  function afterListChange() {
    current = null;
    document.querySelectorAll(".inbox-group").forEach(syncBatchBar);
    refreshEmptyState();
    tick();
  }

  // -- time left ------------------------------------------------------------------------

  function leftText(seconds) {
    if (seconds <= 0) return "expired";
    if (seconds < 3600) return Math.max(1, Math.floor(seconds / 60)) + " min left";
    if (seconds < 86400 * 2) {
      var minutes = Math.floor(seconds / 60);
      return Math.floor(minutes / 60) + " h " + (minutes % 60) + " min left";
    }
    return Math.floor(seconds / 86400) + " days left";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll(".time-left[data-expires-at]").forEach(function (el) {
      var deadline = Date.parse(el.dataset.expiresAt);
      if (isNaN(deadline)) return;
      var seconds = (deadline - now) / 1000;
      var text = leftText(seconds);
      if (el.textContent !== text) el.textContent = text;
      el.classList.toggle("urgent", seconds > 0 && seconds < 3600);
      if (seconds <= 0 && !el.classList.contains("expired")) {
        el.classList.add("expired");
        var item = el.closest(".inbox-item");
        var fields = item && item.querySelector("fieldset.decide");
        if (fields && !fields.disabled) {
          fields.disabled = true;
          var note = document.createElement("p");
          note.className = "refusal";
          note.textContent = "Expired: nobody decided in time, so its run times out.";
          fields.parentNode.insertBefore(note, fields);
        }
      }
    });
  }
  tick();
  window.setInterval(tick, 1000);

  // -- batch bars ---------------------------------------------------------------------

  function syncBatchBar(group) {
    if (!group || !group.isConnected) return;
    var root = group.dataset.rootRun;
    var picks = group.querySelectorAll(".batch-pick");
    var bar = group.querySelector(".batch-bar");
    var template = document.getElementById("batch-bar-template");
    if (picks.length > 1 && !bar && template) {
      var html = template.innerHTML.replace(/ROOT/g, root);
      group.insertAdjacentHTML("beforeend", html);
      bar = group.querySelector(".batch-bar");
    } else if (picks.length < 2 && bar) {
      bar.remove();
      bar = null;
    }
    if (!bar) return;
    var ticked = group.querySelectorAll(".batch-pick:checked").length;
    var count = bar.querySelector("[data-batch-count]");
    if (count) count.textContent = ticked ? ticked + " selected" : "Tick";
    bar.classList.toggle("has-selection", ticked > 0);
  }

  document.addEventListener("change", function (event) {
    if (event.target.classList && event.target.classList.contains("batch-pick")) {
      syncBatchBar(event.target.closest(".inbox-group"));
    }
  });
  document.querySelectorAll(".inbox-group").forEach(syncBatchBar);

  // -- keys -----------------------------------------------------------------------------

  function neighbour(item, step) {
    var all = items();
    var index = all.indexOf(item);
    return index < 0 ? null : all[index + step] || null;
  }

  function select(item, focus) {
    if (current && current !== item) current.classList.remove("is-current");
    current = item;
    if (!item) return;
    item.classList.add("is-current");
    if (focus !== false) {
      item.focus({ preventScroll: true });
      item.scrollIntoView({ block: "nearest", behavior: "smooth" });
    }
  }

  function move(step) {
    var all = items();
    if (!all.length) return;
    if (!current || !current.isConnected) { select(step > 0 ? all[0] : all[all.length - 1]); return; }
    select(neighbour(current, step) || current);
  }

  function refused(item) {
    var fields = item.querySelector("fieldset.decide");
    if (fields && fields.disabled) {
      var reason = item.querySelector(".refusal");
      if (reason) { reason.classList.remove("flash"); void reason.offsetWidth; reason.classList.add("flash"); }
      return true;
    }
    return !fields;
  }

  function focusField(item, selector) {
    if (refused(item)) return;
    var field = item.querySelector(selector);
    if (field) { field.focus(); if (field.select && field.tagName === "INPUT") field.select(); }
  }

  var KEYS = {
    j: function () { move(1); },
    k: function () { move(-1); },
    a: function (item) {
      if (refused(item)) return;
      // with edited arguments checked and shown as a diff, "approve" approves those
      var edited = item.querySelector("details[data-edit][open] form.confirm-edit");
      var form = edited || item.querySelector('form[data-decision="approve"]');
      if (!form) return;
      // a form swapped in a moment ago (the edit's diff) may not be wired to htmx yet: a key
      // pressed then would post the whole page; process() is a no-op once it is wired
      if (window.htmx) window.htmx.process(form);
      form.requestSubmit();
    },
    r: function (item) { focusField(item, '[data-key="reject"]'); },
    e: function (item) {
      if (refused(item)) return;
      var details = item.querySelector("details[data-edit]");
      if (!details) return;
      details.open = true;
      var area = details.querySelector("textarea");
      if (area) area.focus();
    },
    Enter: function (item) { focusField(item, '[data-key="answer"]'); },
    x: function (item) {
      var pick = item.querySelector(".batch-pick");
      if (!pick) return;
      pick.checked = !pick.checked;
      pick.dispatchEvent(new Event("change", { bubbles: true }));
    },
  };

  function typing(target) {
    return target && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName));
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented) return;
    if (typing(event.target)) {
      if (event.key === "Escape") {
        event.target.blur();
        if (current) current.focus({ preventScroll: true });
      }
      return;
    }
    if (keysDialog && keysDialog.open) return;
    if (event.key === "?") {
      event.preventDefault();
      showKeys();
      return;
    }
    var action = KEYS[event.key];
    if (!action) return;
    if (event.key === "Enter" && event.target.closest && event.target.closest("a, button, summary")) return;
    if (event.key !== "j" && event.key !== "k") {
      if (!current || !current.isConnected) move(1);
      if (!current) return;
    }
    event.preventDefault();
    action(current);
  });

  document.addEventListener("click", function (event) {
    var item = event.target.closest && event.target.closest("#inbox-groups .inbox-item");
    if (item) select(item, false);
  });
  document.addEventListener("focusin", function (event) {
    var item = event.target.closest && event.target.closest("#inbox-groups .inbox-item");
    if (item && item !== current) select(item, false);
  });

  function showKeys() {
    if (keysDialog && keysDialog.showModal) keysDialog.showModal();
  }
  if (keysButton && keysDialog && keysDialog.showModal) {
    keysButton.hidden = false;
    keysButton.addEventListener("click", showKeys);
  }

  // -- notifications ------------------------------------------------------------------

  function updateNotifyButton() {
    if (!notifyButton) return;
    notifyButton.hidden = !("Notification" in window) || Notification.permission !== "default";
  }

  function notify(approval) {
    if (!document.hidden || !("Notification" in window) || Notification.permission !== "granted") return;
    var shown = new Notification("Inbox: " + (approval.title || "a run needs a decision"), {
      body: (approval.kind || "item").replace(/_/g, " ") + " · risk " + (approval.risk || "low") + " · #" + approval.id,
      tag: "handoff-approval-" + approval.id,
    });
    shown.onclick = function () {
      window.focus();
      var item = itemById(approval.id);
      if (item) select(item);
      shown.close();
    };
  }

  if (notifyButton) {
    notifyButton.addEventListener("click", function () {
      Notification.requestPermission().then(updateNotifyButton);
    });
  }
  updateNotifyButton();
})();
