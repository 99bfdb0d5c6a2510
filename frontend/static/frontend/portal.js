/* GPU Portal: the little behaviour the server-rendered pages need.
 *
 * - live parts ([data-live], refreshed by htmx) are also refreshed at once when a
 *   websocket named by a [data-ws] ancestor hears of a change; without websockets
 *   htmx's polling keeps them current, only slower;
 * - job logs: follow (a streamed fetch), pause, per-worker download;
 * - TensorBoard: start on demand and embed; compare several jobs from the list;
 * - forms with data-confirm ask first; [data-copy-from] buttons copy a field;
 * - bars get their width (data-width, data-left, in %) from here: the Content-Security-Policy admits no
 *   style="" attribute, but a style set from script is not markup.
 * No inline scripts: everything is wired here from data attributes.
 * Texts go through Django's JavaScript catalogue (/jsi18n/, loaded before this file);
 * without it they stay English.
 */
(function () {
  "use strict";

  // The reader's time zone for the server (frontend/timezones.py): pages rendered after this show local times.
  (function rememberTimeZone() {
    try {
      var zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
      if (zone && /^[A-Za-z0-9_+\/-]+$/.test(zone) && document.cookie.indexOf("portal_tz=" + zone) === -1) {
        document.cookie = "portal_tz=" + zone + "; path=/; max-age=31536000; SameSite=Lax";
      }
    } catch (error) { /* an old browser: times stay in UTC */ }
  })();

  var gettext = window.gettext || function (text) { return text; };
  var interpolate = window.interpolate || function (format, values, named) {
    return format.replace(/%\((\w+)\)s/g, function (match, name) { return String(values[name]); });
  };

  function csrfToken() {
    // The token of the page's own forms (every page has the sign-out or language form): the CSRF cookie is
    // HttpOnly (CSRF_COOKIE_HTTPONLY), so script cannot read it.
    var input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function postJson(url, body) {
    return fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(), Accept: "application/json" },
      body: JSON.stringify(body || {}),
    }).then(function (response) {
      return response.json().catch(function () { return {}; }).then(function (data) {
        if (!response.ok) {
          var message = data.detail || Object.keys(data).map(function (k) { return k + ": " + data[k]; }).join("; ");
          throw new Error(message || serverError(response));
        }
        return data;
      });
    });
  }

  function serverError(response) {
    return interpolate(gettext("The server answered %(status)s %(reason)s."),
                       { status: response.status, reason: response.statusText }, true);
  }

  /* --- live updates ------------------------------------------------------------ */

  function mainText(attribute) {
    var main = document.querySelector("main");
    return (main && main.getAttribute(attribute)) || gettext("Live updates paused; retrying.");
  }

  var liveStatus = null;
  function showLiveStatus(text) {
    if (!liveStatus) {
      liveStatus = document.createElement("p");
      liveStatus.className = "live-status";
      liveStatus.setAttribute("role", "status");
      var main = document.querySelector("main");
      if (main) main.insertBefore(liveStatus, main.firstChild);
    }
    liveStatus.textContent = text;
    liveStatus.hidden = !text;
  }

  var refreshTimer = null;
  function refreshLiveParts() {
    // Several changes in a burst (admission moves a job through three states) -> one refresh.
    if (refreshTimer) return;
    refreshTimer = setTimeout(function () {
      refreshTimer = null;
      if (!window.htmx) return;
      document.querySelectorAll("[data-live]").forEach(function (element) { window.htmx.trigger(element, "live"); });
    }, 250);
  }

  function openSocket(path, attempt) {
    var scheme = location.protocol === "https:" ? "wss://" : "ws://";
    var socket;
    try {
      socket = new WebSocket(scheme + location.host + path);
    } catch (error) {
      return;  // no websockets here: polling carries on
    }
    socket.addEventListener("open", function () { attempt = 0; });
    socket.addEventListener("message", function (event) {
      var data;
      try { data = JSON.parse(event.data); } catch (error) { return; }
      // "job": a job of this page changed state; "queue": waiting jobs moved up or now wait for another reason.
      if (data.type === "job" || data.type === "queue") refreshLiveParts();
    });
    socket.addEventListener("close", function (event) {
      if (event.code === 4401 || event.code === 4404) return;  // signed out or not allowed: do not insist
      var delay = Math.min(30000, 1000 * Math.pow(2, attempt || 0));
      setTimeout(function () { openSocket(path, (attempt || 0) + 1); }, delay);
    });
  }

  function wireSockets() {
    var paths = {};
    document.querySelectorAll("[data-ws]").forEach(function (element) {
      element.getAttribute("data-ws").split(/\s+/).forEach(function (path) { if (path) paths[path] = true; });
    });
    Object.keys(paths).forEach(function (path) { openSocket(path, 0); });
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    var xhr = event.detail.xhr;
    // A session that ended answers the poll with the sign-in page: go there instead of nesting it.
    if (xhr && xhr.responseURL && xhr.responseURL.indexOf("/login/") !== -1) {
      event.detail.shouldSwap = false;
      location.reload();
    }
  });
  document.addEventListener("htmx:responseError", function () {
    showLiveStatus(mainText("data-text-live-error"));
  });
  document.addEventListener("htmx:sendError", function () {
    showLiveStatus(mainText("data-text-live-offline"));
  });
  document.addEventListener("htmx:afterSwap", function () {
    showLiveStatus("");
    restoreSelection();
    applyGeometry();
    jobLiveChanged();
  });

  /* --- bar geometry -------------------------------------------------------------- */

  function applyGeometry() {
    document.querySelectorAll("[data-width]").forEach(function (element) {
      element.style.width = parseFloat(element.getAttribute("data-width")) + "%";
    });
    document.querySelectorAll("[data-left]").forEach(function (element) {
      element.style.left = parseFloat(element.getAttribute("data-left")) + "%";
    });
  }

  /* --- copy buttons ------------------------------------------------------------- */

  function wireCopy(button) {
    button.addEventListener("click", function () {
      var field = document.getElementById(button.getAttribute("data-copy-from"));
      if (!field) return;
      field.select();
      var done = function () { button.textContent = button.getAttribute("data-copied"); };
      if (navigator.clipboard) { navigator.clipboard.writeText(field.value).then(done); }
      else if (document.execCommand("copy")) { done(); }
    });
  }

  /* --- confirmations ------------------------------------------------------------- */

  document.addEventListener("submit", function (event) {
    var form = event.target.closest ? event.target.closest("form[data-confirm]") : null;
    if (form && !window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
  });

  /* --- logs ---------------------------------------------------------------------- */

  function wireLogs(panel) {
    var url = panel.getAttribute("data-logs-url");
    var output = panel.querySelector("[data-logs-output]");
    var follow = panel.querySelector("[data-logs-follow]");
    var pause = panel.querySelector("[data-logs-pause]");
    var download = panel.querySelector("[data-logs-download]");
    var workerSelect = panel.querySelector("[data-logs-worker]");
    var state = panel.querySelector("[data-logs-state]");
    var controller = null;
    var texts = {
      following: panel.getAttribute("data-text-following") || gettext("Following the log…"),
      paused: panel.getAttribute("data-text-paused") || gettext("Paused. Press Follow to continue."),
      ended: panel.getAttribute("data-text-ended") || gettext("End of the log: the job has ended."),
      failed: panel.getAttribute("data-text-failed") || gettext("Could not read the log:") + " ",
    };

    function worker() { return workerSelect ? workerSelect.value : "0"; }

    function stop() {
      if (controller) controller.abort();
      controller = null;
      follow.disabled = false;
      pause.disabled = true;
    }

    function start() {
      stop();
      controller = new AbortController();
      var mine = controller;
      follow.disabled = true;
      pause.disabled = false;
      output.textContent = "";
      state.textContent = texts.following;
      var decoder = new TextDecoder();
      fetch(url + "?worker=" + encodeURIComponent(worker()) + "&tail=1000&follow=1", { credentials: "same-origin", signal: mine.signal })
        .then(function (response) {
          if (!response.ok) throw new Error(serverError(response));
          var reader = response.body.getReader();
          function pump() {
            return reader.read().then(function (chunk) {
              if (chunk.done) {
                if (controller === mine) { state.textContent = texts.ended; stop(); }
                return;
              }
              var atBottom = output.scrollTop + output.clientHeight >= output.scrollHeight - 4;
              output.textContent += decoder.decode(chunk.value, { stream: true });
              if (atBottom) output.scrollTop = output.scrollHeight;
              return pump();
            });
          }
          return pump();
        })
        .catch(function (error) {
          if (error.name === "AbortError") return;
          state.textContent = texts.failed + error.message;
          if (controller === mine) stop();
        });
    }

    follow.addEventListener("click", start);
    pause.addEventListener("click", function () { stop(); state.textContent = texts.paused; });
    if (workerSelect) {
      workerSelect.addEventListener("change", function () {
        download.href = url + "?worker=" + encodeURIComponent(worker());
        download.setAttribute("download", download.getAttribute("download").replace(/worker-\d+/, "worker-" + worker()));
        if (controller) start();
      });
    }
    if (!panel.hasAttribute("data-logs-waiting")) { start(); return; }
    // A job that has not started has no log yet: the panel says so, and follows once the live part says it started.
    panel.logsStart = function () {
      panel.removeAttribute("data-logs-waiting");
      var tools = panel.querySelector("[data-logs-tools]");
      if (tools) tools.hidden = false;
      output.hidden = false;
      state.className = "muted";
      start();
    };
  }

  // The job page's live part was refreshed: start what waited for the job to start (its log, TensorBoard).
  function jobLiveChanged() {
    var live = document.getElementById("job-live");
    if (!live) return;
    var logs = document.querySelector("[data-logs][data-logs-waiting]");
    if (logs && logs.logsStart && live.getAttribute("data-job-log") === "started") logs.logsStart();
    var board = document.querySelector("[data-tensorboard][data-tensorboard-when-running]");
    if (board && live.getAttribute("data-job-status") === "running") {
      board.removeAttribute("data-tensorboard-when-running");
      var button = board.querySelector("[data-tensorboard-open]");
      var state = board.querySelector("[data-tensorboard-state]");
      if (button) button.hidden = false;
      if (state) { state.className = "muted"; state.textContent = state.getAttribute("data-text-ready"); }
    }
  }

  /* --- TensorBoard ------------------------------------------------------------- */

  // TensorBoard opens its settings pane unless its settings (localStorage "_tb_global_settings", on the
  // portal's origin since it is proxied) say otherwise: closed unless the user opened it once (TensorBoard
  // saves that choice in the same place).
  function tensorBoardDefaults() {
    try {
      var saved = JSON.parse(window.localStorage.getItem("_tb_global_settings") || "{}");
      if (typeof saved !== "object" || saved === null) saved = {};
      if (typeof saved.timeSeriesSettingsPaneOpened !== "boolean") {
        saved.timeSeriesSettingsPaneOpened = false;
        window.localStorage.setItem("_tb_global_settings", JSON.stringify(saved));
      }
    } catch (error) { /* storage blocked: TensorBoard keeps its own default */ }
  }

  // The portal's page of a comparison board (/tensorboards/<id>/): the board in a frame, its defaults set first.
  function embedBoard(holder) {
    tensorBoardDefaults();
    var iframe = document.createElement("iframe");
    iframe.src = holder.getAttribute("data-tensorboard-embed");
    iframe.title = holder.getAttribute("data-title") || "TensorBoard";
    iframe.className = "tensorboard full";
    iframe.setAttribute("sandbox", "allow-scripts allow-same-origin allow-downloads");
    iframe.referrerPolicy = "same-origin";
    holder.innerHTML = "";
    holder.appendChild(iframe);
  }

  function wireTensorBoard(panel) {
    var button = panel.querySelector("[data-tensorboard-open]");
    var state = panel.querySelector("[data-tensorboard-state]");
    var frame = panel.querySelector("[data-tensorboard-frame]");
    if (!button) return;
    button.addEventListener("click", function () {
      button.disabled = true;
      state.textContent = panel.getAttribute("data-text-starting") || gettext("Starting TensorBoard…");
      postJson(panel.getAttribute("data-tensorboard-url"))
        .then(function (data) {
          tensorBoardDefaults();
          frame.innerHTML = "";
          var iframe = document.createElement("iframe");
          iframe.src = data.url;
          iframe.title = gettext("TensorBoard of this job");
          iframe.className = "tensorboard";
          // As far as TensorBoard allows: its scripts, its own origin (it fetches data/... and keeps settings in
          // localStorage), downloads of its CSV/JSON; no top-level navigation, pop-ups, forms or modal dialogs.
          iframe.setAttribute("sandbox", "allow-scripts allow-same-origin allow-downloads");
          iframe.referrerPolicy = "same-origin";
          frame.appendChild(iframe);
          var link = document.createElement("a");
          link.href = data.url;
          link.target = "_blank";
          link.rel = "noopener";
          link.textContent = panel.getAttribute("data-text-open") || gettext("Open TensorBoard in a new tab");
          state.textContent = "";
          state.appendChild(link);
        })
        .catch(function (error) { state.textContent = error.message; })
        .finally(function () { button.disabled = false; });
    });
  }

  /* --- compare jobs in TensorBoard (jobs list) ------------------------------------ */

  var selected = {};
  function restoreSelection() {
    document.querySelectorAll("input.select-job").forEach(function (box) { box.checked = !!selected[box.value]; });
    updateCompare();
  }
  function selectedWith(attribute) {
    return Object.keys(selected).filter(function (id) { return selected[id][attribute]; });
  }
  function updateCompare() {
    var button = document.querySelector("[data-compare]");
    if (button) button.disabled = selectedWith("tensorboard").length < 2;
    // Bulk cancel (jobs list): the boxes of jobs the user may cancel belong to its form; the server asks to confirm.
    var cancel = document.querySelector("[data-bulk-cancel]");
    if (cancel) {
      var count = selectedWith("cancellable").length;
      cancel.disabled = count === 0;
      if (!cancel.hasAttribute("data-label-none")) cancel.setAttribute("data-label-none", cancel.textContent);
      cancel.textContent = count === 0 ? cancel.getAttribute("data-label-none")
        : count === 1 ? cancel.getAttribute("data-label-one")
        : interpolate(cancel.getAttribute("data-label-many"), { count: count }, true);
    }
  }
  document.addEventListener("change", function (event) {
    var box = event.target;
    if (!box.classList || !box.classList.contains("select-job")) return;
    if (box.checked) {
      selected[box.value] = { tensorboard: box.hasAttribute("data-tensorboard"), cancellable: box.hasAttribute("data-cancellable") };
    } else {
      delete selected[box.value];
    }
    updateCompare();
  });
  function wireCompare(button) {
    var error = document.querySelector("[data-compare-error]");
    button.addEventListener("click", function () {
      var ids = selectedWith("tensorboard").map(Number);
      button.disabled = true;
      postJson(button.getAttribute("data-compare-url"), { jobs: ids })
        // The board's page in the portal (navigation, its jobs, a way back), not TensorBoard alone.
        .then(function (data) { window.location.href = "/tensorboards/" + data.id + "/"; })
        .catch(function (problem) {
          if (error) { error.textContent = problem.message; error.hidden = false; }
          updateCompare();
        });
    });
  }

  /* --- start ------------------------------------------------------------------- */

  function init() {
    applyGeometry();
    // Boxes the browser kept checked (back to the page) count as selected.
    document.querySelectorAll("input.select-job:checked").forEach(function (box) {
      selected[box.value] = { tensorboard: box.hasAttribute("data-tensorboard"), cancellable: box.hasAttribute("data-cancellable") };
    });
    updateCompare();
    document.querySelectorAll("[data-copy-from]").forEach(wireCopy);
    wireSockets();
    document.querySelectorAll("[data-logs]").forEach(wireLogs);
    document.querySelectorAll("[data-tensorboard]").forEach(wireTensorBoard);
    document.querySelectorAll("[data-compare]").forEach(wireCompare);
    document.querySelectorAll("[data-tensorboard-embed]").forEach(embedBoard);
    var summary = document.querySelector("[data-autofocus]");
    if (summary) summary.focus();
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init); else init();
})();
