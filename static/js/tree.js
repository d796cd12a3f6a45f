// The tree editor's keyboard and memory: the WAI-ARIA tree pattern (one node in the tab
// order, arrow keys move the selection), collapsed subtrees remembered per delegation,
// a warning before leaving with an edit form that has unsaved changes, and Ctrl+Z /
// Ctrl+Shift+Z (or Ctrl+Y) pressing the panel's Undo / Redo buttons.
// Every action is a link or form the server handles; this only drives them.
(() => {
  "use strict";

  let selectedId = null;

  const panel = () => document.getElementById("tree-panel");
  const items = (root) => [...root.querySelectorAll('[role="treeitem"]')];
  const group = (item) => item.querySelector(':scope > ul[role="group"]');
  const card = (item) => item.querySelector(":scope > .node-card");
  const parentItem = (item) => item.parentElement.closest('[role="treeitem"]');
  const isVisible = (item) => !item.parentElement.closest('ul[role="group"][hidden]');
  const visibleItems = (root) => items(root).filter(isVisible);
  const action = (item, name) => card(item).querySelector(`:scope > .node-actions [data-action="${name}"]`);

  function storageKey(root) {
    return `handoff.tree.${root.dataset.root}.collapsed`;
  }

  function collapsedIds(root) {
    try {
      return new Set(JSON.parse(localStorage.getItem(storageKey(root)) || "[]"));
    } catch {
      return new Set();   // storage unavailable or garbled: show everything expanded
    }
  }

  function remember(root) {
    const collapsed = items(root).filter((item) => item.getAttribute("aria-expanded") === "false")
      .map((item) => item.dataset.node);
    try {
      localStorage.setItem(storageKey(root), JSON.stringify(collapsed));
    } catch {
      // private browsing may refuse storage; collapsing still works for this visit
    }
  }

  function setExpanded(item, expanded) {
    if (!group(item)) return;
    item.setAttribute("aria-expanded", String(expanded));
    group(item).hidden = !expanded;
  }

  function select(item, { focus = true } = {}) {
    const root = panel();
    for (const other of items(root)) {
      other.setAttribute("aria-selected", String(other === item));
      other.tabIndex = other === item ? 0 : -1;
    }
    selectedId = item.dataset.node;
    if (focus) item.focus();
  }

  function reveal(item) {
    for (let up = parentItem(item); up; up = parentItem(up)) setExpanded(up, true);
    remember(panel());
  }

  function openEdit(item, field = "name") {
    const details = card(item).querySelector(".node-edit");
    details.open = true;
    details.querySelector(`[name="${field}"]`).focus();
  }

  function moveSelection(item, key) {
    const visible = visibleItems(panel());
    const index = visible.indexOf(item);
    const expanded = item.getAttribute("aria-expanded");
    if (key === "ArrowDown") return visible[index + 1];
    if (key === "ArrowUp") return visible[index - 1];
    if (key === "Home") return visible[0];
    if (key === "End") return visible[visible.length - 1];
    if (key === "ArrowRight") {
      if (expanded === "false") { setExpanded(item, true); remember(panel()); return item; }
      return expanded === "true" ? group(item).querySelector('[role="treeitem"]') : item;
    }
    if (key === "ArrowLeft") {
      if (expanded === "true") { setExpanded(item, false); remember(panel()); return item; }
      return parentItem(item) || item;
    }
    return null;
  }

  function onKeydown(event) {
    const item = event.target;
    if (item.getAttribute("role") !== "treeitem") return;   // keys typed in a node's forms are theirs
    if (event.altKey && (event.key === "ArrowUp" || event.key === "ArrowDown")) {
      const button = action(item, event.key === "ArrowUp" ? "move-up" : "move-down");
      if (button && !button.disabled) button.click();
      event.preventDefault();
      return;
    }
    if (event.key === "Enter") { openEdit(item); event.preventDefault(); return; }
    if (event.key === "Delete") {
      const remove = action(item, "remove");
      if (remove) remove.click();
      event.preventDefault();
      return;
    }
    const next = moveSelection(item, event.key);
    if (next) { select(next); event.preventDefault(); }
  }

  // outside a text field, Ctrl+Z undoes the page's last change and Ctrl+Shift+Z or Ctrl+Y
  // redoes it; in a field they are the browser's own undo of the typing
  function onHistoryKey(event) {
    if (!(event.ctrlKey || event.metaKey) || event.altKey) return;
    if (event.target.closest && event.target.closest("input, textarea, select, [contenteditable]")) return;
    const key = event.key.toLowerCase();
    const which = key === "y" || (key === "z" && event.shiftKey) ? "redo" : key === "z" ? "undo" : null;
    if (!which) return;
    event.preventDefault();
    const button = panel() && panel().querySelector(`[data-history="${which}"]`);
    if (button && !button.disabled) button.click();
  }

  function onClick(event) {
    const toggle = event.target.closest("[data-toggle]");
    const item = event.target.closest('[role="treeitem"]');
    if (toggle && item) {
      setExpanded(item, item.getAttribute("aria-expanded") === "false");
      remember(panel());
      select(item);
      return;
    }
    const link = event.target.closest("[data-select-node]");
    if (link) {
      const target = document.getElementById(`node-${link.dataset.selectNode}`);
      if (!target) return;
      event.preventDefault();
      reveal(target);
      select(target);
      target.scrollIntoView({ block: "center" });
      if (link.dataset.editField) openEdit(target, link.dataset.editField);
      return;
    }
    if (item && !event.target.closest("a, button, input, textarea, select, label, summary")) {
      select(item);
    }
  }

  // Draw the remembered collapsed state and the selection; on first load also honour a
  // link's #fragment (a node, or a field of its edit form), after a swap focus what the
  // server marked (a form just opened) or else the selected node.
  function setUp({ firstLoad }) {
    const root = panel();
    if (!root) return;
    const collapsed = collapsedIds(root);
    for (const handle of root.querySelectorAll(".drag-handle")) handle.hidden = false;
    for (const item of items(root)) {
      if (!group(item)) continue;
      card(item).querySelector("[data-toggle]").hidden = false;
      setExpanded(item, !collapsed.has(item.dataset.node));
    }
    const fragment = firstLoad && location.hash ? document.getElementById(location.hash.slice(1)) : null;
    const target = fragment && root.contains(fragment) ? fragment : null;
    const wanted = root.dataset.selected || selectedId;
    const chosen = (target && target.closest('[role="treeitem"]'))
      || (wanted && document.getElementById(`node-${wanted}`)) || items(root)[0];
    if (!chosen) return;
    reveal(chosen);
    select(chosen, { focus: false });
    const autofocus = root.querySelector("[data-autofocus]");
    if (target && target.matches("input, textarea")) {
      const details = target.closest("details");
      if (details) details.open = true;
      target.focus();
    } else if (autofocus) {
      autofocus.focus();
    } else if (!firstLoad || target) {
      chosen.focus();
    }
  }

  // unsaved changes in a node's edit or add form: ask before leaving the page, and keep a
  // draft in this browser (its version included, so a save over someone else's newer
  // change is still refused) that comes back into the form after a closed tab or a crash
  const draftKey = (form) => `handoff:tree-draft:${new URL(form.action, location.href).pathname}`;
  const drafted = new WeakMap();
  function keepDraft(form) {
    clearTimeout(drafted.get(form));
    drafted.set(form, setTimeout(() => {
      const fields = [...new FormData(form).entries()]
        .filter(([name, value]) => typeof value === "string" && name !== "csrfmiddlewaretoken");
      try { localStorage.setItem(draftKey(form), JSON.stringify({ at: Date.now(), fields })); }
      catch (error) { /* storage full or disabled: the guard still asks before leaving */ }
    }, 400));
  }
  function dropDraft(form) {
    clearTimeout(drafted.get(form));
    localStorage.removeItem(draftKey(form));
    delete form.dataset.dirty;
  }
  function restoreDrafts(root) {
    for (const form of root.querySelectorAll("form[data-guard]")) {
      let saved = null;
      try { saved = JSON.parse(localStorage.getItem(draftKey(form)) || "null"); } catch (error) { saved = null; }
      if (!saved || !Array.isArray(saved.fields) || form.dataset.dirty) continue;
      for (const [name, value] of saved.fields) {
        const field = form.elements.namedItem(name);
        if (field && "value" in field && field.type !== "checkbox") field.value = value;
      }
      form.dataset.dirty = "true";
      const details = form.closest("details");
      if (details) details.open = true;
      const note = document.createElement("p");
      note.className = "help draft-note";
      note.textContent = `Your unsaved draft from ${new Date(saved.at).toLocaleString()} is back in this form; save it or cancel.`;
      form.prepend(note);
    }
  }
  document.addEventListener("input", (event) => {
    const form = event.target.closest && event.target.closest("form[data-guard]");
    if (!form) return;
    form.dataset.dirty = "true";
    keepDraft(form);
  });
  document.addEventListener("submit", (event) => {
    if (event.target.matches("form[data-guard]")) dropDraft(event.target);
  });
  document.addEventListener("click", (event) => {
    const cancel = event.target.closest && event.target.closest("form[data-guard] a");
    if (cancel) dropDraft(cancel.closest("form"));   // "Cancel" means the draft goes too
  });
  document.addEventListener("htmx:beforeRequest", (event) => {
    const form = event.detail.elt.closest && event.detail.elt.closest("form[data-guard]");
    if (form) dropDraft(form);
  });
  window.addEventListener("beforeunload", (event) => {
    if (document.querySelector("form[data-guard][data-dirty]")) event.preventDefault();
  });

  // drag a node by its handle to another place among its siblings; dropping posts the
  // same move the Up / Down buttons do, with the new place, and the panel comes back
  let dragged = null;
  const siblingsOf = (item) => [...item.parentElement.children].filter((li) => li.matches('[role="treeitem"]'));
  function dropPlace(event) {
    const over = event.target.closest && event.target.closest('[role="treeitem"]');
    if (!dragged || !over || over === dragged || over.parentElement !== dragged.parentElement) return null;
    const box = card(over).getBoundingClientRect();
    const after = event.clientY > box.top + box.height / 2;
    return { over, after };
  }
  function clearMarks() {
    for (const marked of document.querySelectorAll(".drop-before, .drop-after")) {
      marked.classList.remove("drop-before", "drop-after");
    }
  }
  document.addEventListener("dragstart", (event) => {
    const handle = event.target.closest && event.target.closest(".drag-handle");
    if (!handle) return;
    dragged = handle.closest('[role="treeitem"]');
    dragged.classList.add("dragging");
    event.dataTransfer.effectAllowed = "move";
    event.dataTransfer.setData("text/plain", dragged.dataset.node);
  });
  document.addEventListener("dragover", (event) => {
    const place = dropPlace(event);
    clearMarks();
    if (!place) return;
    event.preventDefault();
    place.over.classList.add(place.after ? "drop-after" : "drop-before");
  });
  document.addEventListener("drop", (event) => {
    const place = dropPlace(event);
    clearMarks();
    if (!place) return;
    event.preventDefault();
    const siblings = siblingsOf(dragged).filter((li) => li !== dragged);
    const to = siblings.indexOf(place.over) + (place.after ? 1 : 0);
    const url = dragged.querySelector(":scope > .node-card .drag-handle").dataset.moveUrl;
    selectedId = dragged.dataset.node;
    window.htmx.ajax("POST", url, { target: "#tree-panel", swap: "outerHTML", values: { to: String(to) } });
  });
  document.addEventListener("dragend", () => {
    if (dragged) dragged.classList.remove("dragging");
    dragged = null;
    clearMarks();
  });

  document.addEventListener("keydown", onHistoryKey);
  document.addEventListener("keydown", onKeydown);
  document.addEventListener("click", onClick);
  document.addEventListener("htmx:afterSettle", () => setUp({ firstLoad: false }));
  setUp({ firstLoad: true });
  if (panel()) restoreDrafts(panel());
})();
