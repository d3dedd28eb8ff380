// Render every inline Vega-Lite spec on the page with the vendored vega-embed bundle.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll('script[type="application/json"][data-vega-target]').forEach(function (el) {
    var spec = JSON.parse(el.textContent);
    vegaEmbed("#" + el.dataset.vegaTarget, spec, { actions: false, renderer: "svg" }).catch(function (err) {
      console.error("chart " + el.dataset.vegaTarget + " failed: " + err);
    });
  });
});

// A table wider than the content column wraps inside long words (see extra.css) rather than scroll.
// Tables inside closed <details> have no width yet: they are measured when opened.
function markWideTables(root) {
  root.querySelectorAll("table").forEach(function (table) {
    var box = table.closest(".md-typeset__scrollwrap") || table.parentElement;
    if (table.offsetWidth && box && (table.offsetWidth > box.clientWidth + 1 || box.scrollWidth > box.clientWidth + 1)) {
      table.setAttribute("data-wide", "");
    }
  });
}
document.addEventListener("DOMContentLoaded", function () {
  markWideTables(document);
  document.querySelectorAll("details").forEach(function (d) {
    d.addEventListener("toggle", function () { if (d.open) markWideTables(d); });
  });
});
window.addEventListener("load", function () { markWideTables(document); });
