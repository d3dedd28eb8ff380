// Render every inline Vega-Lite spec on the page with the vendored vega-embed bundle.
document.addEventListener("DOMContentLoaded", function () {
  document.querySelectorAll('script[type="application/json"][data-vega-target]').forEach(function (el) {
    var spec = JSON.parse(el.textContent);
    vegaEmbed("#" + el.dataset.vegaTarget, spec, { actions: false, renderer: "svg" }).catch(function (err) {
      console.error("chart " + el.dataset.vegaTarget + " failed: " + err);
    });
  });
});

// Table cells wrap between words only: a token with a character the browser may break after (a hyphen,
// a slash, a sign) is kept whole in a nowrap span; a table too wide for the column scrolls in its own box
// (extra.css). Code in cells is nowrap already.
function keepTokensWhole(root) {
  root.querySelectorAll("td, th").forEach(function (cell) {
    var walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    var nodes = [];
    for (var n = walker.nextNode(); n; n = walker.nextNode()) {
      if (!n.parentElement.closest("code, .tok") && /\S[^\sA-Za-z0-9]|[^\sA-Za-z0-9]\S/.test(n.nodeValue)) nodes.push(n);
    }
    nodes.forEach(function (node) {
      var parts = node.nodeValue.split(/(\s+)/);
      var frag = document.createDocumentFragment();
      parts.forEach(function (part) {
        if (/^\S+$/.test(part) && /[^A-Za-z0-9]/.test(part)) {
          var span = document.createElement("span");
          span.className = "tok";
          span.textContent = part;
          frag.appendChild(span);
        } else if (part) {
          frag.appendChild(document.createTextNode(part));
        }
      });
      node.parentNode.replaceChild(frag, node);
    });
  });
}
document.addEventListener("DOMContentLoaded", function () { keepTokensWhole(document); });
