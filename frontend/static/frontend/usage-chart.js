/* The console's usage chart (uPlot): GPU-hours by day from the page's #usage-chart-data. A file, not an
 * inline script: the Content-Security-Policy admits none. */
(function () {
  var box = document.getElementById("usage-chart");
  var data = JSON.parse(document.getElementById("usage-chart-data").textContent);
  if (!box || !window.uPlot) { return; }
  var colors = ["#1f6feb", "#e36209", "#2da44e", "#8250df", "#bf3989", "#57606a"];
  var names = Object.keys(data.series);
  var single = names.length === 1;
  var unit = box.getAttribute("data-unit");
  var xs = data.days.map(function (day) { return Date.parse(day + "T00:00:00Z") / 1000; });
  var series = [{}].concat(names.map(function (name, index) {
    var color = colors[index % colors.length];
    return {
      label: name, stroke: color, width: 2, fill: single ? color + "66" : undefined,
      paths: single ? uPlot.paths.bars({size: [0.7, 48]}) : undefined, points: {show: !single},
      value: function (u, v) { return v == null ? "—" : v.toFixed(2); }
    };
  }));
  var height = 280;
  var plot = new uPlot({
    width: box.clientWidth || 800, height: height, series: series,
    tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
    scales: {x: {time: true}, y: {range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; }}},
    axes: [{}, {label: unit}]
  }, [xs].concat(names.map(function (name) { return data.series[name]; })), box);
  window.addEventListener("resize", function () { plot.setSize({width: box.clientWidth, height: height}); });
})();
