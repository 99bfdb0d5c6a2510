/* A deployment's live charts (uPlot): requests per second and p95 latency per variant, polled from the
 * metrics URL its <script> tag names. A file, not an inline script: the Content-Security-Policy admits none.
 *
 * Until the deployment has answered a request, each chart box says so (its data-text-empty) instead of
 * drawing empty axes; once it has, the charts are drawn with a legend of our own (a swatch and the variant's
 * name) in place of uPlot's table of raw values. When the variants change (a promote to another version, a
 * rollback), the charts start again with the new ones. */
(function () {
  "use strict";
  var script = document.currentScript;
  var url = script.getAttribute("data-metrics-url");
  var colors = ["#1f6feb", "#e36209", "#2da44e", "#8250df", "#bf3989", "#57606a"];
  var boxes = ["deployment-rps", "deployment-p95"].map(function (id) { return document.getElementById(id); });
  if (!boxes[0] || !boxes[1]) { return; }
  var initial = JSON.parse(document.getElementById("deployment-initial").textContent);

  var names = [], xs = [], rps = [], p95 = [], plots = [], last = null;

  function reset(variants) {
    names = variants.map(function (v) { return v.variant; });
    xs = []; rps = names.map(function () { return []; }); p95 = names.map(function () { return []; });
    last = null;
    plots.forEach(function (plot) { plot.destroy(); });
    plots = [];
    boxes.forEach(function (box) { box.textContent = ""; });
  }

  function empty(box) {
    if (box.querySelector(".chart-empty")) { return; }
    box.textContent = "";
    var note = document.createElement("p");
    note.className = "chart-empty";
    note.textContent = box.getAttribute("data-text-empty") || "No traffic yet";
    box.appendChild(note);
  }

  function legend(box) {
    var list = document.createElement("ul");
    list.className = "chart-legend";
    list.setAttribute("aria-label", box.getAttribute("data-text-legend") || "Variants");
    names.forEach(function (name, i) {
      var item = document.createElement("li");
      var swatch = document.createElement("span");
      swatch.className = "swatch";
      swatch.style.background = colors[i % colors.length];
      item.appendChild(swatch);
      item.appendChild(document.createTextNode(name));
      list.appendChild(item);
    });
    return list;
  }

  function draw() {
    if (!window.uPlot) { return; }
    if (!plots.length) {
      boxes.forEach(function (box) {
        box.textContent = "";
        var area = document.createElement("div");
        box.appendChild(area);
        box.appendChild(legend(box));
        plots.push(new window.uPlot({
          width: box.clientWidth || 800, height: 220,
          legend: {show: false},
          series: [{}].concat(names.map(function (name, i) {
            return {label: name, stroke: colors[i % colors.length], width: 2};
          })),
          scales: {x: {time: true}}, axes: [{}, {label: box.getAttribute("data-unit")}]
        }, [xs].concat(boxes.indexOf(box) === 0 ? rps : p95), area));
      });
    } else {
      plots[0].setData([xs].concat(rps));
      plots[1].setData([xs].concat(p95));
    }
  }

  function show(variants) {
    var served = variants.some(function (v) { return v.requests > 0; });
    if (served) { draw(); } else { boxes.forEach(empty); }
  }

  function sameNames(variants) {
    return variants.length === names.length && variants.every(function (v, i) { return v.variant === names[i]; });
  }

  function poll() {
    fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}}).then(function (r) {
      if (!r.ok) { throw new Error(String(r.status)); }
      return r.json();
    }).then(function (data) {
      if (!sameNames(data.variants)) { reset(data.variants); }
      var now = Date.now() / 1000, byName = {};
      data.variants.forEach(function (v) { byName[v.variant] = v; });
      if (last) {
        xs.push(now);
        names.forEach(function (name, i) {
          var v = byName[name], before = last[name];
          rps[i].push(v && before ? Math.max(0, v.requests - before.requests) / (now - last.at) : null);
          p95[i].push(v ? v.latency_ms.p95 : null);
        });
        if (xs.length > 150) { xs.shift(); rps.forEach(function (s) { s.shift(); }); p95.forEach(function (s) { s.shift(); }); }
      }
      last = {at: now}; data.variants.forEach(function (v) { last[v.variant] = v; });
      show(data.variants);
    }).catch(function () { /* the next poll tries again; the page's live parts say when the server is away */ });
  }

  reset(initial);
  show(initial);
  poll(); setInterval(poll, 2000);
})();
