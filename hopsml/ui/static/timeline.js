// The run's timeline page: draws timeline/trace.json (Chrome trace events) as one lane per rank on a canvas.
// Wheel zooms around the pointer, dragging pans, hovering names the event under the pointer.
(function () {
  "use strict";
  var box = document.getElementById("timeline");
  if (!box) { return; }
  var canvas = document.getElementById("timeline-canvas");
  var detail = document.getElementById("timeline-detail");
  var legend = document.getElementById("timeline-legend");
  var COLOURS = {collective: "#3b6fd4", waiting: "#f0a030", input: "#d9453b", compute: "#3fa34d",
                 checkpoint: "#8a4fc8", gradients: "#2aa6a6", gpu: "#333333", other: "#999999"};
  var LANE = 34, TOP = 18, LEFT = 64;
  var events = [], ranks = [], t0 = 0, t1 = 1, view = [0, 1], boxes = [];

  function colour(e) {
    if (e.name === "waiting for peers") { return COLOURS.waiting; }
    return COLOURS[e.cat] || COLOURS.other;
  }

  function draw() {
    var width = box.clientWidth || 800;
    canvas.width = width;
    canvas.height = TOP + LANE * Math.max(ranks.length, 1) + 4;
    var g = canvas.getContext("2d");
    g.clearRect(0, 0, canvas.width, canvas.height);
    var scale = (width - LEFT) / (view[1] - view[0]);
    g.font = "11px sans-serif";
    g.fillStyle = "#555";
    g.fillText((view[0] / 1000).toFixed(1) + " ms", LEFT, 12);
    g.fillText((view[1] / 1000).toFixed(1) + " ms", width - 60, 12);
    boxes = [];
    ranks.forEach(function (rank, i) {
      var y = TOP + i * LANE;
      g.fillStyle = "#222";
      g.fillText("rank " + rank, 4, y + LANE / 2 + 4);
      g.strokeStyle = "#ddd";
      g.beginPath(); g.moveTo(LEFT, y + LANE - 1); g.lineTo(width, y + LANE - 1); g.stroke();
    });
    events.forEach(function (e) {
      if (e.ts + e.dur < view[0] || e.ts > view[1]) { return; }
      var x = LEFT + (e.ts - view[0]) * scale, w = Math.max(1, e.dur * scale);
      var lane = ranks.indexOf(e.pid), nested = e.name === "waiting for peers" || e.cat === "input";
      var y = TOP + lane * LANE + (nested ? LANE / 2 : 2), h = nested ? LANE / 2 - 3 : LANE / 2 - 2;
      if (x < LEFT) { w -= LEFT - x; x = LEFT; }
      g.fillStyle = colour(e);
      g.fillRect(x, y, w, h);
      boxes.push([x, y, w, h, e]);
    });
  }

  function show(text) { detail.textContent = text; }

  canvas.addEventListener("wheel", function (ev) {
    ev.preventDefault();
    var rect = canvas.getBoundingClientRect();
    var at = view[0] + (ev.clientX - rect.left - LEFT) / (canvas.width - LEFT) * (view[1] - view[0]);
    var factor = ev.deltaY < 0 ? 0.8 : 1.25;
    var a = at - (at - view[0]) * factor, b = at + (view[1] - at) * factor;
    view = [Math.max(t0, a), Math.min(t1, Math.max(b, a + 1))];
    draw();
  });
  var dragging = null;
  canvas.addEventListener("mousedown", function (ev) { dragging = [ev.clientX, view[0], view[1]]; });
  window.addEventListener("mouseup", function () { dragging = null; });
  canvas.addEventListener("mousemove", function (ev) {
    var rect = canvas.getBoundingClientRect(), mx = ev.clientX - rect.left, my = ev.clientY - rect.top;
    if (dragging) {
      var shift = (ev.clientX - dragging[0]) / (canvas.width - LEFT) * (dragging[2] - dragging[1]);
      view = [dragging[1] - shift, dragging[2] - shift];
      draw();
      return;
    }
    for (var i = boxes.length - 1; i >= 0; i--) {
      var b = boxes[i];
      if (mx >= b[0] && mx <= b[0] + b[2] && my >= b[1] && my <= b[1] + b[3]) {
        var e = b[4], args = e.args ? " " + JSON.stringify(e.args) : "";
        show("rank " + e.pid + ": " + e.name + " (" + (e.cat || "") + "), " + (e.dur / 1000).toFixed(3) +
             " ms at " + (e.ts / 1000).toFixed(3) + " ms" + args);
        return;
      }
    }
  });

  Object.keys(COLOURS).forEach(function (name) {
    var swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.textContent = "\u25A0 " + (name === "waiting" ? "waiting for peers" : name) + "  ";
    swatch.style.color = COLOURS[name];
    legend.appendChild(swatch);
  });

  fetch(box.getAttribute("data-trace")).then(function (r) { return r.json(); }).then(function (trace) {
    events = (trace.traceEvents || []).filter(function (e) { return e.ph === "X"; });
    // a rank's lane and the run's extent come from every timed event: system samples too (a launched function
    // with no spans still has its lane, from its first sample to its last)
    var timed = (trace.traceEvents || []).filter(function (e) { return e.ph !== "M"; });
    var seen = {};
    timed.forEach(function (e) { seen[e.pid] = true; });
    ranks = Object.keys(seen).map(Number).sort(function (a, b) { return a - b; });
    t0 = Math.min.apply(null, timed.map(function (e) { return e.ts; }).concat([0]));
    t1 = Math.max.apply(null, timed.map(function (e) { return e.ts + (e.dur || 0); }).concat([t0 + 1]));
    view = [t0, t1];
    box.setAttribute("data-events", String(events.length));
    box.setAttribute("data-ranks", ranks.join(","));
    draw();
    if (!events.length) {
      show("No spans were recorded: mark the function's steps with hopsml.timeline.span(\"name\"); hopsml's " +
           "readers, checkpoint saves and collectives record theirs.");
    }
  }).catch(function (err) { show("the trace cannot be read: " + err); });
  window.addEventListener("resize", draw);
}());
