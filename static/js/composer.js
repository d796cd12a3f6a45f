// The composer's small helpers: show the selected role's sections, add structured
// criterion rows, show each row's parameters for its kind, focus the field a finding
// names, keep the JSON view open across refreshes, copy the packet. Without this file
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
})();
