// Render every inline Vega-Lite spec on the page with the vendored vega-embed bundle.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll('script[type="application/json"][data-vega-target]').forEach(function (el) {
    var spec = JSON.parse(el.textContent);
    vegaEmbed("#" + el.dataset.vegaTarget, spec, { actions: false, renderer: "svg" }).catch(function (err) {
      console.error("chart " + el.dataset.vegaTarget + " failed: " + err);
    });
  });
});
