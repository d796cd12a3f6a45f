// The composer's small helpers: show the selected role's sections, add structured
// criterion rows, show each row's parameters for its kind, focus the field a finding
// names, keep the JSON view and the form in step both ways (the check refreshes the JSON
// as one types in the form; typing in the JSON re-draws the form from the server), copy
// and download the packet, keep a draft of what is typed in this browser until it is
// saved (offered back after a closed tab or a crash), warn before leaving with unsaved
// changes. Without this file every section is reachable, "Check" re-renders the page and
// "Fill the form" fills it from the JSON.
(function () {
  "use strict";
  if (!document.getElementById("composer")) return;
  const composer = function () { return document.getElementById("composer"); };
  let dirty = false;

  // -- the form: role sections and structured criteria, wired again when it is re-drawn --
  const kinds = JSON.parse((document.getElementById("criterion-kinds") || {}).textContent || "{}");
  function showParams(row) {
    const kind = row.querySelector("select[name$='-kind']");
    const wanted = (kinds[kind.value] || []).map(function (p) { return p === "field" ? "path" : p; });
    row.querySelectorAll("[data-param]").forEach(function (cell) {
      const name = cell.dataset.param;
      cell.hidden = name !== "kind" && !wanted.includes(name);
    });
  }
  function showRoleSections(form) {
    const role = form.querySelector("[name=subagent_type]");
    if (!role) return;
    form.querySelectorAll("[data-roles]").forEach(function (section) {
      section.hidden = !section.dataset.roles.split(" ").includes(role.value);
    });
  }
  function wire(form) {
    const role = form.querySelector("[name=subagent_type]");
    if (role) role.addEventListener("change", function () { showRoleSections(form); });
    const rows = form.querySelector("#criterion-rows");
    if (rows) {
      rows.querySelectorAll(".criterion-row").forEach(showParams);
      rows.addEventListener("change", function (event) {
        if (event.target.matches("select[name$='-kind']")) showParams(event.target.closest(".criterion-row"));
      });
      const add = form.querySelector("[data-add-criterion]");
      const template = form.querySelector("#criterion-template");
      const total = form.querySelector("[name=criterion-TOTAL_FORMS]");
      add.hidden = false;
      add.addEventListener("click", function () {
        const index = Number(total.value);
        rows.insertAdjacentHTML("beforeend", template.innerHTML.replace(/__prefix__/g, String(index)));
        total.value = String(index + 1);
        const row = rows.lastElementChild;
        showParams(row);
        row.querySelector("select").focus();
      });
    }
    form.addEventListener("input", function () { dirty = true; scheduleDraft(); });
    form.addEventListener("submit", function () { dirty = false; forgetDraft(); });
  }
  wire(composer());

  // -- findings focus their field --------------------------------------------------------
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

  // -- the JSON view, both ways ------------------------------------------------------------
  const jsonForm = document.getElementById("json-form");
  const editor = jsonForm && jsonForm.querySelector("[name=packet_json]");
  const status = jsonForm && jsonForm.querySelector("[data-json-status]");
  const problems = document.getElementById("json-problems");
  let typedInJson = false;   // the editor holds the person's text: the check does not overwrite it
  let filling = null;        // the fill request in flight, aborted by a newer one

  function showPacket(text) {
    if (!editor) return;
    const download = jsonForm.querySelector("[data-download]");
    if (download) download.href = "data:application/json;charset=utf-8," + encodeURIComponent(text);
    if (!typedInJson) editor.value = text;
  }
  // each check brings the packet as the form stands: the JSON view follows the form
  document.body.addEventListener("htmx:afterSwap", function (event) {
    if (event.detail.target.id !== "lint-panel") return;
    const latest = document.getElementById("packet-latest");
    if (latest) showPacket(JSON.parse(latest.textContent));
  });
  // a person typing in the form takes the JSON view back over
  document.addEventListener("input", function (event) {
    if (composer() && composer().contains(event.target)) typedInJson = false;
  });

  // the packet in the editor, or an uploaded file's: the page is not posted, so what the
  // form holds (its name too) stays whatever the packet turns out to be
  function fill(file) {
    if (filling) filling.abort();
    filling = new AbortController();
    const body = new FormData(composer());
    body.set("packet_json", editor.value);
    if (file) body.set("packet_file", file);
    status.textContent = "Reading the packet…";
    fetch(jsonForm.dataset.fillUrl, {
      method: "POST", body: body, signal: filling.signal,
      headers: { "X-CSRFToken": body.get("csrfmiddlewaretoken") },
    }).then(function (response) {
      return response.text().then(function (html) { return { ok: response.ok, status: response.status, html: html }; });
    }).then(function (answer) {
      if (answer.status === 422) {
        problems.innerHTML = answer.html;
        status.textContent = "The form keeps what it held until the JSON reads as a packet.";
        if (file) problems.scrollIntoView({ block: "center" });
        return;
      }
      if (!answer.ok) { status.textContent = "Could not read the packet (" + answer.status + "); try again."; return; }
      problems.innerHTML = "";
      replaceForm(answer.html);
      status.textContent = "The form follows the JSON.";
      dirty = true;
      scheduleDraft();
    }).catch(function (error) {
      if (error.name !== "AbortError") status.textContent = "Could not reach the server; the form is unchanged.";
    });
  }
  function replaceForm(html) {
    const holder = document.createElement("div");
    holder.innerHTML = html;
    const fresh = holder.querySelector("#composer");
    if (!fresh) return;
    composer().replaceWith(fresh);
    if (window.htmx) window.htmx.process(fresh);
    wire(fresh);
    showRoleSections(fresh);
    fresh.dispatchEvent(new Event("change", { bubbles: true }));   // the check runs for the new form
  }
  if (editor) {
    let pending = null;
    editor.addEventListener("input", function () {
      typedInJson = true;
      clearTimeout(pending);
      pending = setTimeout(fill, 400);
    });
    // with scripts the "Fill the form" button fills in place too
    jsonForm.addEventListener("submit", function (event) {
      event.preventDefault();
      const upload = jsonForm.querySelector("[name=packet_file]");
      if (upload.files.length) {
        typedInJson = false;   // the file's packet shows in the editor once the form follows it
        fill(upload.files[0]);
        upload.value = "";
        return;
      }
      typedInJson = true;
      fill();
    });
  }

  const copy = document.querySelector("[data-copy]");
  if (copy && navigator.clipboard) {
    copy.hidden = false;
    copy.addEventListener("click", function () {
      navigator.clipboard.writeText(document.getElementById(copy.dataset.copy).value).then(
        function () { status.textContent = "Copied."; },
        function () { status.textContent = "Could not copy; select the text instead."; });
    });
  }

  // -- drafts and the unsaved-changes guard --------------------------------------------
  // One draft per page (a delegation's version, or a new one from the same start): the
  // form's fields as name/value pairs, written a moment after the last keystroke.
  const draftKey = "handoff:draft:" + location.pathname + location.search + ":" +
    ((composer().querySelector("[name=base_version]") || {}).value || "new");
  let draftTimer = null;
  function fields() {
    return Array.from(new FormData(composer()).entries())
      .filter(function (pair) { return typeof pair[1] === "string" && pair[0] !== "csrfmiddlewaretoken"; });
  }
  function scheduleDraft() {
    clearTimeout(draftTimer);
    draftTimer = setTimeout(function () {
      try {
        localStorage.setItem(draftKey, JSON.stringify({ at: Date.now(), fields: fields() }));
      } catch (error) { /* storage full or disabled: the guard below still warns */ }
    }, 500);
  }
  function forgetDraft() { clearTimeout(draftTimer); localStorage.removeItem(draftKey); }
  if (jsonForm) jsonForm.addEventListener("submit", function () { dirty = false; });
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
      const form = composer();
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
      showRoleSections(form);
      offer.hidden = true;
      dirty = true;
      form.dispatchEvent(new Event("change", { bubbles: true }));   // the check runs on it
    });
    offer.querySelector("[data-draft-discard]").addEventListener("click", function () {
      forgetDraft();
      offer.hidden = true;
    });
  }
})();
