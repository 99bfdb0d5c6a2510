/* A deployment's live charts (uPlot): requests per second and p95 latency per variant, polled from the
 * metrics URL its <script> tag names. A file, not an inline script: the Content-Security-Policy admits none. */
(function () {
  if (!window.uPlot) { return; }
  var url = document.currentScript.getAttribute("data-metrics-url");
  var colors = ["#1f6feb", "#e36209", "#2da44e", "#8250df", "#bf3989", "#57606a"];
  var names = JSON.parse(document.getElementById("deployment-initial").textContent).map(function (v) { return v.variant; });
  var xs = [], rps = names.map(function () { return []; }), p95 = names.map(function () { return []; });
  var last = null;
  function make(id, series) {
    var box = document.getElementById(id);
    return new uPlot({
      width: box.clientWidth || 800, height: 220,
      series: [{}].concat(names.map(function (name, i) { return {label: name, stroke: colors[i % colors.length], width: 2}; })),
      scales: {x: {time: true}}, axes: [{}, {label: box.getAttribute("data-unit")}]
    }, [xs].concat(series), box);
  }
  var rpsPlot = make("deployment-rps", rps), p95Plot = make("deployment-p95", p95);
  function poll() {
    fetch(url, {credentials: "same-origin", headers: {"Accept": "application/json"}}).then(function (r) { return r.json(); }).then(function (data) {
      var now = Date.now() / 1000, byName = {};
      data.variants.forEach(function (v) { byName[v.variant] = v; });
      if (last) {
        xs.push(now);
        names.forEach(function (name, i) {
          var v = byName[name], before = last[name];
          rps[i].push(v && before ? (v.requests - before.requests) / (now - last.at) : null);
          p95[i].push(v ? v.latency_ms.p95 : null);
        });
        if (xs.length > 150) { xs.shift(); rps.forEach(function (s) { s.shift(); }); p95.forEach(function (s) { s.shift(); }); }
        rpsPlot.setData([xs].concat(rps)); p95Plot.setData([xs].concat(p95));
      }
      last = {at: now}; data.variants.forEach(function (v) { last[v.variant] = v; });
    }).catch(function () {});
  }
  poll(); setInterval(poll, 2000);
})();
