/* The submit form sizes the job: when the department, cluster or GPU type changes, the GPU types and images
   offered there and the sizing panel (free quota, idle GPUs) are asked for again (frontend.views.job_new_sizing)
   and replaced in place, keeping the chosen values where they are still offered. Without script the form still
   works: it shows the choices of its initial cluster and the server refuses a mismatch with its message.
   The start preview below the fields (frontend.views.job_new_preview: would the job start now, else why and
   about when, and which change starts it sooner) is asked for again, debounced, whenever a field changes. */
(function () {
  "use strict";

  var form = document.querySelector("form[data-sizing-url]");
  if (!form) {
    return;
  }
  var asked = 0;
  var previewed = 0;
  var previewTimer = null;
  var PREVIEW_DELAY_MS = 400;

  function preview() {
    var url = form.getAttribute("data-preview-url");
    var token = form.elements.csrfmiddlewaretoken;
    if (!url || !token) {
      return;
    }
    var number = ++previewed;
    fetch(url, {
      method: "POST",
      body: new FormData(form),
      credentials: "same-origin",
      headers: { Accept: "text/html", "X-CSRFToken": token.value },
    })
      .then(function (response) {
        if (!response.ok) {
          throw new Error(String(response.status));
        }
        return response.text();
      })
      .then(function (html) {
        var panel = form.querySelector("[data-preview]");
        if (number === previewed && panel) {
          panel.outerHTML = html; // only the answer to the latest question is shown
        }
      })
      .catch(function () {
        /* the preview keeps what it showed; submitting still works and says what happened */
      });
  }

  function previewSoon() {
    window.clearTimeout(previewTimer);
    previewTimer = window.setTimeout(preview, PREVIEW_DELAY_MS);
  }

  function setOptions(select, values, chosen) {
    if (!select) {
      return;
    }
    var keep = values.indexOf(select.value) !== -1 ? select.value : chosen;
    while (select.options.length) {
      select.remove(0);
    }
    values.forEach(function (value) {
      select.add(new Option(value, value, false, value === keep));
    });
  }

  function refresh() {
    var params = new URLSearchParams();
    ["department", "cluster", "gpu_type", "image"].forEach(function (name) {
      var field = form.elements[name];
      if (field) {
        params.set(name, field.value);
      }
    });
    var number = ++asked;
    form.setAttribute("aria-busy", "true");
    fetch(form.getAttribute("data-sizing-url") + "?" + params.toString(), {
      credentials: "same-origin",
      headers: { Accept: "application/json" },
    })
      .then(function (response) {
        if (!response.ok) {
          throw new Error(String(response.status));
        }
        return response.json();
      })
      .then(function (data) {
        if (number !== asked) {
          return; // an answer to an older question
        }
        setOptions(form.elements.gpu_type, data.gpu_types, data.gpu_type);
        setOptions(form.elements.image, data.images, data.image);
        var panel = form.querySelector("[data-sizing]");
        if (panel) {
          panel.outerHTML = data.html;
        }
        previewSoon(); // the GPU type or image offered may have changed with the choices
      })
      .catch(function () {
        /* the panel keeps what it showed; the server checks the choices on submit anyway */
      })
      .finally(function () {
        if (number === asked) {
          form.removeAttribute("aria-busy");
        }
      });
  }

  form.addEventListener("change", function (event) {
    var name = event.target && event.target.name;
    if (name === "department" || name === "cluster" || name === "gpu_type") {
      refresh();
    } else {
      previewSoon();
    }
  });
  form.addEventListener("input", previewSoon);
  previewSoon();
})();
