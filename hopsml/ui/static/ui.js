// hopsml ui: sorting and filtering of tables, and polling of RUNNING experiments and growing logs.
// Everything from the server is put in the page with textContent, never as HTML.
"use strict";

(function () {
  const POLL_MS = 3000;

  function cellValue(row, index, numeric) {
    const cell = row.cells[index];
    if (!cell) return numeric ? NaN : "";
    const raw = cell.dataset.value !== undefined ? cell.dataset.value : cell.textContent.trim();
    if (!numeric) return raw.toLowerCase();
    return raw === "" ? NaN : parseFloat(raw);
  }

  function sortTable(table, th) {
    const index = Array.from(th.parentNode.cells).indexOf(th);
    const numeric = th.dataset.sort === "num";
    const ascending = !th.classList.contains("sorted-asc");
    table.querySelectorAll("th[data-sort]").forEach((h) => h.classList.remove("sorted-asc", "sorted-desc"));
    th.classList.add(ascending ? "sorted-asc" : "sorted-desc");
    const body = table.tBodies[0];
    const rows = Array.from(body.rows);
    rows.sort((a, b) => {
      const x = cellValue(a, index, numeric), y = cellValue(b, index, numeric);
      if (numeric) {
        if (isNaN(x) && isNaN(y)) return 0;
        if (isNaN(x)) return 1;   // empty values last either way
        if (isNaN(y)) return -1;
        return ascending ? x - y : y - x;
      }
      return ascending ? x.localeCompare(y) : y.localeCompare(x);
    });
    rows.forEach((r) => body.appendChild(r));
  }

  document.querySelectorAll("table.sortable").forEach((table) => {
    table.querySelectorAll("th[data-sort]").forEach((th) => th.addEventListener("click", () => sortTable(table, th)));
  });

  // --- the experiments table: filters and live rows ---
  const table = document.getElementById("experiments");
  const nameBox = document.getElementById("filter-name");
  const stateBox = document.getElementById("filter-state");
  const typeBox = document.getElementById("filter-type");

  function applyFilters() {
    if (!table) return;
    const text = nameBox.value.trim().toLowerCase();
    let shown = 0;
    Array.from(table.tBodies[0].rows).forEach((row) => {
      const ok = (!text || row.dataset.name.toLowerCase().includes(text)) &&
        (!stateBox.value || row.dataset.state === stateBox.value) &&
        (!typeBox.value || row.dataset.type === typeBox.value);
      row.classList.toggle("hidden", !ok);
      if (ok) shown += 1;
    });
    const count = document.getElementById("shown-count");
    if (count) count.textContent = shown + " of " + table.tBodies[0].rows.length + " shown";
  }

  function numberText(value) {
    if (value === null || value === undefined) return "";
    if (Number.isInteger(value)) return String(value);
    return String(Number(value.toPrecision(4)));
  }

  function updateRow(row, data) {
    row.dataset.state = data.state;
    const badge = row.querySelector("span.state");
    badge.className = "state " + data.state;
    badge.textContent = data.state;
    const problem = row.querySelector(".problem");
    if (problem) problem.textContent = data.problem || "";
    const metric = row.querySelector("td.metric");
    metric.dataset.value = data.metric === null ? "" : data.metric;
    metric.textContent = numberText(data.metric);
    const duration = row.querySelector("td.duration");
    duration.dataset.value = data.duration === null ? "" : data.duration;
    duration.textContent = numberText(data.duration);
  }

  function pollExperiments() {
    fetch(table.dataset.poll, { headers: { Accept: "application/json" } })
      .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
      .then((rows) => {
        const byId = new Map(Array.from(table.tBodies[0].rows).map((r) => [r.dataset.id, r]));
        if (rows.some((d) => !byId.has(d.id))) { window.location.reload(); return; }  // a new run started
        rows.forEach((d) => updateRow(byId.get(d.id), d));
        applyFilters();
        if (rows.some((d) => d.state === "RUNNING")) window.setTimeout(pollExperiments, POLL_MS);
      })
      .catch(() => window.setTimeout(pollExperiments, POLL_MS * 3));
  }

  if (table) {
    [nameBox, stateBox, typeBox].forEach((box) => ["input", "change"].forEach((e) => box.addEventListener(e, applyFilters)));
    applyFilters();
    if (table.querySelector("tr[data-state=RUNNING]")) window.setTimeout(pollExperiments, POLL_MS);
  }

  // --- logs: show the tail, then follow it while the run is RUNNING ---
  function follow(pre, offset) {
    const url = pre.dataset.src + (offset === null ? "" : "?offset=" + offset);
    fetch(url, { headers: { Accept: "application/json" } })
      .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
      .then((data) => {
        if (data.text) {
          const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          pre.appendChild(document.createTextNode(data.text));
          if (atEnd) pre.scrollTop = pre.scrollHeight;
        }
        if (!pre.textContent && data.state !== "RUNNING") pre.textContent = "(empty)";
        const badge = document.getElementById("run-state");
        if (badge && data.state) { badge.textContent = data.state; badge.className = "state " + data.state; }
        if (data.state === "RUNNING") window.setTimeout(() => follow(pre, data.offset), POLL_MS);
        pre.dataset.loaded = "1";
      })
      .catch(() => { pre.dataset.loaded = "error"; });
  }
  document.querySelectorAll("pre.tail").forEach((pre) => follow(pre, null));
})();
