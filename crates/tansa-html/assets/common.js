"use strict";
// Shared by every tansa page: error capture, formatting, DOM helpers, sortable tables,
// flame graph frames. No dependencies; data only ever reaches the DOM as text.
var T = (function () {
  var errors = document.getElementById("errors");
  function report(msg) {
    errors.textContent += msg + "\n";
    document.body.classList.add("has-errors");
  }
  window.addEventListener("error", function (e) {
    report("Uncaught " + (e.message || e) + (e.filename ? " (" + e.filename + ":" + e.lineno + ")" : ""));
  });
  window.addEventListener("unhandledrejection", function (e) {
    report("Unhandled rejection: " + e.reason);
  });
  var consoleError = console.error;
  console.error = function () {
    report("console.error: " + Array.prototype.join.call(arguments, " "));
    consoleError.apply(console, arguments);
  };
  // Flame graph frames report their errors here.
  window.tansaFrameError = function (msg) { report("flame graph: " + msg); };

  var SVGNS = "http://www.w3.org/2000/svg";

  function el(tag, attrs) {
    var e = document.createElement(tag);
    setAttrs(e, attrs);
    for (var i = 2; i < arguments.length; i++) append(e, arguments[i]);
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    setAttrs(e, attrs);
    for (var i = 2; i < arguments.length; i++) append(e, arguments[i]);
    return e;
  }
  function setAttrs(e, attrs) {
    if (!attrs) return;
    for (var k in attrs) {
      if (attrs[k] === null || attrs[k] === undefined) continue;
      if (k === "text") e.textContent = attrs[k];
      else if (k === "class") e.setAttribute("class", attrs[k]);
      else if (k.slice(0, 2) === "on") e.addEventListener(k.slice(2), attrs[k]);
      else e.setAttribute(k, attrs[k]);
    }
  }
  function append(e, c) {
    if (c === null || c === undefined || c === false) return;
    if (Array.isArray(c)) { c.forEach(function (x) { append(e, x); }); return; }
    e.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }

  // 1234567 -> "1,234,567" (the exact figure, grouped).
  function int(n) {
    if (n === null || n === undefined) return "—";
    return String(Math.round(n)).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  }
  // Bytes for people: "1.5 MiB".
  function bytes(n) {
    if (n === null || n === undefined) return "—";
    var a = Math.abs(n), units = ["B", "KiB", "MiB", "GiB", "TiB"], u = 0;
    while (a >= 1024 && u < units.length - 1) { a /= 1024; u++; }
    var s = u === 0 ? String(a) : a.toFixed(a < 10 ? 2 : a < 100 ? 1 : 0);
    return (n < 0 ? "-" : "") + s + " " + units[u];
  }
  function ns(n) {
    if (n === null || n === undefined) return "—";
    if (n >= 1e9) return (n / 1e9).toFixed(n >= 1e10 ? 1 : 3) + " s";
    if (n >= 1e6) return (n / 1e6).toFixed(n >= 1e7 ? 1 : 2) + " ms";
    if (n >= 1e3) return (n / 1e3).toFixed(1) + " µs";
    return n + " ns";
  }
  function pct(x) { return (x === null || x === undefined) ? "—" : x.toFixed(1) + "%"; }

  function section(id, title, note) {
    var s = el("section", { id: id }, el("h2", { text: title }));
    if (note) s.appendChild(el("p", { class: "note", text: note }));
    document.getElementById("main").appendChild(s);
    return s;
  }

  function summary(pairs) {
    var dl = el("dl", { class: "summary" });
    pairs.forEach(function (p) {
      if (p[1] === null || p[1] === undefined || p[1] === "") return;
      dl.appendChild(el("dt", { text: p[0] }));
      dl.appendChild(el("dd", { text: String(p[1]) }));
    });
    document.getElementById("summary").appendChild(dl);
  }

  function warnings(list, into) {
    if (!list || !list.length) return;
    var ul = el("ul", { class: "warnings" });
    list.forEach(function (w) { ul.appendChild(el("li", { text: w })); });
    (into || document.getElementById("summary")).appendChild(ul);
  }

  // A sortable table. columns: [{label, get(row), fmt(value, row)?, num?, title?, cls?}].
  // Returns {el, update(rows)}; clicking a header sorts by it (again: the other way).
  function table(columns, rows, opts) {
    opts = opts || {};
    var sortCol = opts.sort === undefined ? -1 : opts.sort, desc = opts.desc !== false;
    var t = el("table", { class: "units" + (opts.cls ? " " + opts.cls : "") });
    var head = el("tr");
    var tbody = el("tbody");
    t.appendChild(el("thead", null, head));
    t.appendChild(tbody);
    columns.forEach(function (c, i) {
      var th = el("th", { class: c.num ? "num" : "", title: c.title || null, text: c.label });
      th.addEventListener("click", function () {
        if (sortCol === i) desc = !desc; else { sortCol = i; desc = !!c.num; }
        render();
      });
      head.appendChild(th);
    });
    var current = rows;
    function render() {
      var r = current.slice();
      if (sortCol >= 0) {
        var g = columns[sortCol].get;
        r.sort(function (a, b) {
          var x = g(a), y = g(b);
          if (x === y) return 0;
          if (x === null || x === undefined) return 1;
          if (y === null || y === undefined) return -1;
          var c = x < y ? -1 : 1;
          return desc ? -c : c;
        });
      }
      Array.prototype.forEach.call(head.children, function (th, i) {
        th.classList.toggle("sorted", i === sortCol);
        th.classList.toggle("desc", i === sortCol && desc);
      });
      var body = el("tbody");
      r.forEach(function (row) {
        var tr = el("tr", { class: opts.rowClass ? opts.rowClass(row) : null });
        columns.forEach(function (c) {
          var v = c.get(row);
          var shown = c.fmt ? c.fmt(v, row) : v;
          var td = el("td", { class: (c.num ? "num" : "") + (c.cls ? " " + c.cls : "") });
          if (shown !== null && typeof shown === "object") td.appendChild(shown);
          else td.textContent = shown === null || shown === undefined ? "—" : String(shown);
          if (c.title && c.titleOf) td.title = c.titleOf(v, row);
          tr.appendChild(td);
        });
        body.appendChild(tr);
      });
      if (!r.length) {
        body.appendChild(el("tr", null, el("td", { colspan: columns.length, class: "empty", text: opts.empty || "nothing" })));
      }
      t.replaceChild(body, tbody);
      tbody = body;
    }
    render();
    return { el: t, update: function (rows) { current = rows; render(); } };
  }

  // The flame graphs given to the page, each in its own frame (its script runs there).
  function flameGraphs(list) {
    var s = section("flame-graphs", "Flame graphs");
    if (!list || !list.length) {
      s.appendChild(el("p", { class: "none", text: "No flame graphs were given to this report." }));
      return;
    }
    // The frame forwards its script errors to this page.
    var guard = "<script>window.onerror=function(m,s,l){try{parent.tansaFrameError(m+' (line '+l+')')}catch(e){}};<\/script>";
    list.forEach(function (f) {
      var doc = f.svg.replace(/^\s*<\?xml[^>]*\?>\s*/, "").replace(/^\s*<!DOCTYPE[^>]*>\s*/i, "");
      s.appendChild(el("h3", { text: f.title }));
      s.appendChild(el("iframe", {
        class: "flame",
        title: f.title,
        srcdoc: "<!DOCTYPE html><html><head><meta charset='utf-8'>" + guard +
          "<style>html,body{margin:0}svg{display:block;width:100%}</style></head><body>" + doc + "</body></html>"
      }));
    });
  }

  function done() {
    var loading = document.getElementById("loading");
    if (loading) loading.remove();
    // Time since navigation started: loading, parsing and drawing.
    document.getElementById("render-ms").textContent = performance.now().toFixed(0);
    document.body.setAttribute("data-rendered", "1");
  }

  function data() { return JSON.parse(document.getElementById("data").textContent); }

  // Runs a page's drawing, reporting an exception rather than leaving a blank page.
  function run(f) {
    try { f(); } catch (e) { report("Uncaught " + (e && e.stack ? e.stack : e)); }
    done();
  }

  return {
    el: el, svg: svg, int: int, bytes: bytes, ns: ns, pct: pct, section: section,
    summary: summary, warnings: warnings, table: table, flameGraphs: flameGraphs,
    data: data, run: run, report: report
  };
})();
