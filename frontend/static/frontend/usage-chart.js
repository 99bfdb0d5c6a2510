/* The console's usage chart (uPlot): GPU-hours by day from the page's #usage-chart-data, one bar per day with a
 * department's part stacked on the others', the same for one department and for all of them. A file, not an
 * inline script: the Content-Security-Policy admits none.
 *
 * A day's bar is centred on its midnight (its date's tick) and the x scale runs from half a day before the first
 * day to half a day after the last, so every day's bar, today's included, is whole inside the chart. Stacking: the series are drawn from the top of the stack down
 * (each one the sum of its department and those below it, drawn over the taller ones before it), and the legend
 * shows each department's own value. */
(function () {
  var box = document.getElementById("usage-chart");
  var source = document.getElementById("usage-chart-data");
  if (!box || !source || !window.uPlot) { return; }
  var data = JSON.parse(source.textContent);
  if (!data.days.length) { return; }
  var colors = ["#1f6feb", "#e36209", "#2da44e", "#8250df", "#bf3989", "#57606a"];
  var names = Object.keys(data.series);
  var unit = box.getAttribute("data-unit");
  var halfDay = 43200;
  var xs = data.days.map(function (day) { return Date.parse(day + "T00:00:00Z") / 1000; });
  // sums[i][d]: the stack up to and including department i on day d.
  var sums = [];
  names.forEach(function (name, index) {
    sums.push(data.series[name].map(function (value, day) { return (index ? sums[index - 1][day] : 0) + (value || 0); }));
  });
  var order = names.map(function (name, index) { return index; }).reverse(); // the top of the stack first
  var bars = uPlot.paths.bars({size: [0.7, 48]});
  var series = [{}].concat(order.map(function (index) {
    var color = colors[index % colors.length];
    var own = data.series[names[index]];
    return {
      label: names[index], stroke: color, width: 1, fill: color + "cc", paths: bars, points: {show: false},
      value: function (u, v, seriesIndex, day) {
        var value = day == null ? null : own[day];
        return value == null ? "—" : (Math.round(value * 100) / 100).toLocaleString();
      }
    };
  }));
  var height = 280;
  var first = xs[0] - halfDay, last = xs[xs.length - 1] + halfDay;
  var plot = new uPlot({
    width: box.clientWidth || 800, height: height, series: series,
    tzDate: function (ts) { return uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"); },
    scales: {
      x: {time: true, range: function () { return [first, last]; }},
      y: {range: function (u, min, max) { return [0, Math.max(1, max * 1.1)]; }}
    },
    // One tick per day (or every few days on a long period), at the day's midnight under its bar, labelled M/D.
    axes: [{
      incrs: [86400, 2 * 86400, 7 * 86400, 14 * 86400, 28 * 86400],
      values: function (u, ticks) {
        return ticks.map(function (ts) { var d = new Date(ts * 1e3); return (d.getUTCMonth() + 1) + "/" + d.getUTCDate(); });
      }
    }, {label: unit}],
    cursor: {points: {show: false}}
  }, [xs].concat(order.map(function (index) {
    // No bar where the department used nothing that day (not even a hairline on the axis).
    return sums[index].map(function (sum, day) { return data.series[names[index]][day] ? sum : null; });
  })), box);
  window.addEventListener("resize", function () { plot.setSize({width: box.clientWidth, height: height}); });
})();
