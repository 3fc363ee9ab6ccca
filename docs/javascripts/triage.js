// "What are you seeing?": turns the triage page's nested lists into filters.
// Without JavaScript the page is complete as it is; this only hides what does not match.
// Filter values come from the page itself (data attributes written by `trainwreck build`).
(function () {
  "use strict";

  function labelsOf(root, selector, attribute) {
    var seen = {};
    root.querySelectorAll(selector).forEach(function (node) {
      (node.getAttribute(attribute) || "").split(" ").forEach(function (value) {
        if (value) seen[value] = true;
      });
    });
    return seen;
  }

  function select(name, text, options) {
    var label = document.createElement("label");
    label.className = "tw-triage-filter";
    label.textContent = text + " ";
    var box = document.createElement("select");
    box.name = name;
    var all = document.createElement("option");
    all.value = "";
    all.textContent = "any";
    box.appendChild(all);
    options.forEach(function (pair) {
      var option = document.createElement("option");
      option.value = pair[0];
      option.textContent = pair[1];
      box.appendChild(option);
    });
    label.appendChild(box);
    return label;
  }

  function setup() {
    var bar = document.querySelector(".tw-triage-filters");
    if (!bar || bar.dataset.ready) return;
    bar.dataset.ready = "1";
    var page = bar.closest("article") || document;
    // Only the symptoms and components that some failure on the page has; every framework and
    // scale of the vocabulary (a failure for "any" framework matches each of them).
    var present = {
      symptom: labelsOf(page, ".tw-triage-symptom", "data-symptom"),
      component: labelsOf(page, ".tw-triage-component", "data-component"),
    };
    var filters = {};
    ["symptom", "component", "framework", "scale"].forEach(function (key) {
      var options = JSON.parse(bar.getAttribute("data-" + key + "-options") || "[]");
      if (present[key]) {
        options = options.filter(function (pair) { return present[key][pair[0]]; });
      }
      filters[key] = select(key, bar.getAttribute("data-" + key + "-label") || key, options);
      bar.appendChild(filters[key]);
    });
    var count = document.createElement("p");
    count.className = "tw-triage-count";
    bar.appendChild(count);
    bar.hidden = false;

    function value(key) { return filters[key].querySelector("select").value; }

    // The filters live in the address (?symptom=hang&framework=fsdp), so a view can be shared:
    // a value from the address is taken only when the page offers it.
    var params = new URLSearchParams(window.location.search);
    Object.keys(filters).forEach(function (key) {
      var box = filters[key].querySelector("select");
      var wanted = params.get(key);
      for (var i = 0; i < box.options.length; i++) {
        if (wanted && box.options[i].value === wanted) box.value = wanted;
      }
    });
    function remember() {
      var query = new URLSearchParams(window.location.search);
      Object.keys(filters).forEach(function (key) {
        if (value(key)) query.set(key, value(key)); else query.delete(key);
      });
      var search = query.toString();
      history.replaceState(history.state, "",
        window.location.pathname + (search ? "?" + search : "") + window.location.hash);
    }
    function has(node, attribute, wanted, anyValue) {
      var values = (node.getAttribute(attribute) || "").split(" ");
      return !wanted || values.indexOf(wanted) >= 0 || (anyValue && values.indexOf(anyValue) >= 0);
    }

    function apply() {
      var shown = {};
      page.querySelectorAll(".tw-triage-symptom").forEach(function (section) {
        var sectionVisible = false;
        var symptomOk = has(section, "data-symptom", value("symptom"));
        section.querySelectorAll(".tw-triage-component").forEach(function (group) {
          var groupVisible = false;
          var componentOk = has(group, "data-component", value("component"));
          group.querySelectorAll(".tw-candidate").forEach(function (marker) {
            var ok = symptomOk && componentOk &&
              has(marker, "data-framework", value("framework"), "any") &&
              has(marker, "data-scale", value("scale"));
            var item = marker.closest("li");
            if (item) item.hidden = !ok;
            if (ok) {
              groupVisible = true;
              var link = item && item.querySelector("a");
              if (link) shown[link.getAttribute("href")] = true;
            }
          });
          group.hidden = !groupVisible;
          sectionVisible = sectionVisible || groupVisible;
        });
        section.hidden = !sectionVisible;
      });
      var n = Object.keys(shown).length;
      count.textContent = n === 0 ? "No failure matches: widen a filter." :
        n + (n === 1 ? " failure matches." : " failures match.");
    }

    Object.keys(filters).forEach(function (key) {
      filters[key].querySelector("select").addEventListener("change", function () {
        apply();
        remember();
      });
    });
    apply();
  }

  if (typeof document$ !== "undefined") {
    document$.subscribe(setup);  // mkdocs-material's page-load stream (instant navigation too)
  } else {
    document.addEventListener("DOMContentLoaded", setup);
  }
})();
