/* The submit form sizes the job: when the department, cluster or GPU type changes, the GPU types and images
   offered there and the sizing panel (free quota, idle GPUs) are asked for again (frontend.views.job_new_sizing)
   and replaced in place, keeping the chosen values where they are still offered. Without script the form still
   works: it shows the choices of its initial cluster and the server refuses a mismatch with its message. */
(function () {
  "use strict";

  var form = document.querySelector("form[data-sizing-url]");
  if (!form) {
    return;
  }
  var asked = 0;

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
    }
  });
})();
