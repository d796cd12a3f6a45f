// The composer's small helpers: show the selected role's sections, add structured
// criterion rows, show each row's parameters for its kind, focus the field a finding
// names, keep the JSON view open across refreshes, copy the packet, keep a draft of what
// is typed in this browser until it is saved (offered back after a closed tab or a
// crash), warn before leaving with unsaved changes. Without this file
// every section is reachable and "Check" re-renders the page.
(function () {
  "use strict";
  const form = document.getElementById("composer");
  if (!form) return;

  // -- sections for the role picked ------------------------------------------------
  const role = form.querySelector("[name=subagent_type]");
  function showRoleSections() {
    form.querySelectorAll("[data-roles]").forEach(function (section) {
      section.hidden = !section.dataset.roles.split(" ").includes(role.value);
    });
  }
  if (role) role.addEventListener("change", showRoleSections);

  // -- structured criteria -------------------------------------------------------------
  const kinds = JSON.parse((document.getElementById("criterion-kinds") || {}).textContent || "{}");
  function showParams(row) {
    const kind = row.querySelector("select[name$='-kind']");
    const wanted = (kinds[kind.value] || []).map(function (p) { return p === "field" ? "path" : p; });
    row.querySelectorAll("[data-param]").forEach(function (cell) {
      const name = cell.dataset.param;
      cell.hidden = name !== "kind" && !wanted.includes(name);
    });
  }
  const rows = document.getElementById("criterion-rows");
  if (rows) {
    rows.querySelectorAll(".criterion-row").forEach(showParams);
    rows.addEventListener("change", function (event) {
      if (event.target.matches("select[name$='-kind']")) showParams(event.target.closest(".criterion-row"));
    });
    const add = form.querySelector("[data-add-criterion]");
    const template = document.getElementById("criterion-template");
    const total = form.querySelector("[name=criterion-TOTAL_FORMS]");
    add.hidden = false;
    add.addEventListener("click", function () {
      const index = Number(total.value);
      const html = template.innerHTML.replace(/__prefix__/g, String(index));
      rows.insertAdjacentHTML("beforeend", html);
      total.value = String(index + 1);
      const row = rows.lastElementChild;
      showParams(row);
      row.querySelector("select").focus();
    });
  }

  // -- the check panel -----------------------------------------------------------------
  let jsonOpen = false;
  document.addEventListener("toggle", function (event) {
    if (event.target.id === "json-view") jsonOpen = event.target.open;
  }, true);
  document.body.addEventListener("htmx:afterSwap", function () {
    const view = document.getElementById("json-view");
    if (view && jsonOpen) view.open = true;
    wireCopy();
  });

  function reveal(element) {
    for (let node = element; node; node = node.parentElement) {
      if (node.hidden) node.hidden = false;
      if (node.tagName === "DETAILS") node.open = true;
    }
  }
  document.addEventListener("click", function (event) {
    const link = event.target.closest("[data-focus]");
    if (!link) return;
    const target = document.getElementById(link.dataset.focus);
    if (!target) return;
    event.preventDefault();
    reveal(target);
    target.scrollIntoView({ block: "center" });
    target.focus();
  });

  function wireCopy() {
    const button = document.querySelector("[data-copy]");
    if (!button || !navigator.clipboard) return;
    button.hidden = false;
    button.addEventListener("click", function () {
      const text = document.getElementById(button.dataset.copy).textContent;
      const status = document.querySelector("[data-copy-status]");
      navigator.clipboard.writeText(text).then(
        function () { status.textContent = "Copied."; },
        function () { status.textContent = "Could not copy; select the text instead."; });
    });
  }
  wireCopy();

  // -- drafts and the unsaved-changes guard --------------------------------------------
  // One draft per page (a delegation's version, or a new one from the same start): the
  // form's fields as name/value pairs, written a moment after the last keystroke.
  const draftKey = "handoff:draft:" + location.pathname + location.search + ":" +
    ((form.querySelector("[name=base_version]") || {}).value || "new");
  let dirty = false;
  let pending = null;
  function fields() {
    return Array.from(new FormData(form).entries())
      .filter(function (pair) { return typeof pair[1] === "string" && pair[0] !== "csrfmiddlewaretoken"; });
  }
  function writeDraft() {
    try {
      localStorage.setItem(draftKey, JSON.stringify({ at: Date.now(), fields: fields() }));
    } catch (error) { /* storage full or disabled: the guard below still warns */ }
  }
  form.addEventListener("input", function () {
    dirty = true;
    clearTimeout(pending);
    pending = setTimeout(writeDraft, 500);
  });
  form.addEventListener("submit", function () {
    dirty = false;
    localStorage.removeItem(draftKey);
  });
  window.addEventListener("beforeunload", function (event) {
    if (dirty) { event.preventDefault(); event.returnValue = ""; }
  });
  const saved = (function () {
    try { return JSON.parse(localStorage.getItem(draftKey) || "null"); } catch (error) { return null; }
  })();
  const offer = document.getElementById("draft-offer");
  if (saved && offer && Array.isArray(saved.fields)) {
    offer.querySelector("[data-draft-time]").textContent = new Date(saved.at).toLocaleString();
    offer.hidden = false;
    offer.querySelector("[data-draft-restore]").addEventListener("click", function () {
      const byName = {};
      saved.fields.forEach(function (pair) { (byName[pair[0]] = byName[pair[0]] || []).push(pair[1]); });
      Array.from(form.elements).forEach(function (element) {
        const values = byName[element.name];
        if (!values || element.type === "hidden" || element.type === "file") return;
        if (element.type === "checkbox" || element.type === "radio") element.checked = values.includes(element.value);
        else if (element.tagName === "SELECT" && element.multiple) {
          Array.from(element.options).forEach(function (option) { option.selected = values.includes(option.value); });
        } else element.value = values[0];
      });
      showRoleSections();
      offer.hidden = true;
      dirty = true;
      form.dispatchEvent(new Event("change", { bubbles: true }));   // the check runs on it
    });
    offer.querySelector("[data-draft-discard]").addEventListener("click", function () {
      localStorage.removeItem(draftKey);
      offer.hidden = true;
    });
  }
})();
