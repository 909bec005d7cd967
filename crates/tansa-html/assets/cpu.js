"use strict";
// The CPU page. Data: see crates/tansa-html/src/cpu_page.rs (CpuData).
T.run(function () {
  var D = T.data(), el = T.el, h = D.header;
  T.summary([
    ["Recording", D.source],
    ["Target", h.target + (h.pid !== null && h.pid !== undefined ? " (process " + h.pid + ")" : "")],
    ["Event", h.event + " every " + T.ns(h.period_ns) + " (" + h.sampler + ")"],
    ["Samples", T.int(h.total_samples)],
    ["CPU time", T.ns(h.total_samples * h.period_ns)],
    ["Duration", T.ns(h.duration_ns)],
    ["CPUs", h.cpus],
    ["Kernel", h.kernel ? "sampled" : "not sampled"],
    ["Lost", h.lost_samples || h.lost_records ? T.int(h.lost_samples) + " samples, " + T.int(h.lost_records) + " records" : null]
  ]);
  T.warnings(h.notes.concat(h.warnings));

  // ---- Top functions.
  var fs = T.section("functions", "Top functions",
    "Self: samples in the function itself; total: samples with the function anywhere on the stack." +
    (D.function_count > D.functions.length ? " The " + D.functions.length + " with most samples of " + D.function_count + "." : ""));
  fs.appendChild(T.table([
    { label: "function", get: function (u) { return u.unit; }, cls: "name" },
    { label: "self samples", num: true, get: function (u) { return u.self_samples; }, fmt: T.int },
    { label: "self %", num: true, get: function (u) { return u.self_percent; }, fmt: T.pct },
    { label: "total samples", num: true, get: function (u) { return u.total_samples; }, fmt: T.int },
    { label: "total %", num: true, get: function (u) { return u.total_percent; }, fmt: T.pct },
    { label: "self time", num: true, get: function (u) { return u.self_ns; }, fmt: T.ns },
    { label: "where", get: function (u) { return u.file ? u.file + (u.line ? ":" + u.line : "") : (u.module || ""); }, cls: "name" }
  ], D.functions, { sort: 1, desc: true }).el);

  // ---- Per process, split by kind of address space.
  var colors = { user: "#4e79a7", shared: "#f28e2b", kernel: "#e15759", other: "#bab0ac" };
  var ps = T.section("processes", "Per process and space",
    "Samples of each process in its executable (user), shared libraries, the kernel, and elsewhere.");
  var legend = el("div", { class: "legend" });
  Object.keys(colors).forEach(function (k) { legend.appendChild(el("span", null, el("i", { style: "background:" + colors[k] }), k)); });
  ps.appendChild(legend);
  // The split is flattened into the unit (as in tansa.cpu-report.v1).
  function sp(u, k) { var v = u[k + "_samples"]; return v === undefined ? null : v; }
  ps.appendChild(T.table([
    { label: "process", get: function (u) { return u.unit; }, cls: "name" },
    { label: "pid", num: true, get: function (u) { return u.pid; } },
    { label: "samples", num: true, get: function (u) { return u.total_samples; }, fmt: T.int },
    { label: "%", num: true, get: function (u) { return u.total_percent; }, fmt: T.pct },
    { label: "user", num: true, get: function (u) { return sp(u, "user"); }, fmt: T.int },
    { label: "shared", num: true, get: function (u) { return sp(u, "shared"); }, fmt: T.int },
    { label: "kernel", num: true, get: function (u) { return sp(u, "kernel"); }, fmt: T.int },
    { label: "other", num: true, get: function (u) { return sp(u, "other"); }, fmt: T.int },
    { label: "split", get: function (u) { return u.total_samples; }, fmt: function (v, u) {
        var bar = el("span", { class: "bar" });
        if (sp(u, "user") === null || !v) return bar;
        Object.keys(colors).forEach(function (k) {
          var n = sp(u, k);
          if (n) bar.appendChild(el("i", { style: "width:" + (100 * n / v) + "%;background:" + colors[k], title: k + ": " + n }));
        });
        return bar;
      } }
  ], D.processes, { sort: 2, desc: true }).el);

  var ls = T.section("libraries", "Per library");
  ls.appendChild(T.table([
    { label: "library", get: function (u) { return u.unit; }, cls: "name" },
    { label: "class", get: function (u) { return u["class"] || ""; } },
    { label: "samples", num: true, get: function (u) { return u.self_samples; }, fmt: T.int },
    { label: "%", num: true, get: function (u) { return u.self_percent; }, fmt: T.pct }
  ], D.libraries, { sort: 2, desc: true }).el);

  // ---- Flame graphs.
  T.flameGraphs(D.flame_graphs);

  // ---- Annotations of the hottest functions.
  var an = T.section("annotations", "Hottest functions: source and assembly",
    "Samples per source line and per instruction, from the code and source stored in the recording.");
  if (!D.annotations.length) an.appendChild(el("p", { class: "none", text: "No function could be annotated." }));
  function heat(n, max) {
    if (!n || !max) return null;
    return "background:rgba(230,80,40," + (0.12 + 0.6 * n / max).toFixed(2) + ")";
  }
  D.annotations.forEach(function (a) {
    an.appendChild(el("h3", { text: a.unit }));
    an.appendChild(el("p", { class: "note", text: T.int(a.samples) + " samples of " + T.int(a.all_samples) +
      " (" + T.pct(a.all_samples ? 100 * a.samples / a.all_samples : 0) + "), " + a.size + " bytes at 0x" + a.start.toString(16) + " in " + a.module_path }));
    var grid = el("div", { class: "annotation" });
    var src = el("div");
    a.sources.forEach(function (b) {
      var max = Math.max.apply(null, b.lines.map(function (l) { return l[2]; }).concat([0]));
      src.appendChild(el("p", { class: "note", text: b.file + (b.available ? "" : " (source not stored)") }));
      var t = el("table", { class: "listing source" });
      b.lines.forEach(function (l) {
        t.appendChild(el("tr", { style: heat(l[2], max) },
          el("td", { class: "n", text: l[2] ? T.int(l[2]) : "" }),
          el("td", { class: "n", text: String(l[0]) }),
          el("td", { text: l[1] === null ? "" : l[1] })));
      });
      if (b.truncated) t.appendChild(el("tr", null, el("td", { colspan: 3, class: "n", text: "… " + b.truncated + " more lines" })));
      src.appendChild(t);
    });
    var asm = el("div");
    var maxi = Math.max.apply(null, a.instructions.map(function (i) { return i.samples; }).concat([0]));
    var t = el("table", { class: "listing asm" });
    a.instructions.forEach(function (i) {
      if (i.line) t.appendChild(el("tr", { class: "loc" }, el("td", { colspan: 3, text: i.line })));
      t.appendChild(el("tr", { style: heat(i.samples, maxi) },
        el("td", { class: "n", text: i.samples ? T.int(i.samples) : "" }),
        el("td", { class: "n", text: "+0x" + i.offset.toString(16) }),
        el("td", { text: i.text })));
    });
    if (a.truncated) t.appendChild(el("tr", null, el("td", { colspan: 3, class: "n", text: "… " + a.truncated + " instructions without samples left out" })));
    asm.appendChild(t);
    grid.appendChild(src);
    grid.appendChild(asm);
    an.appendChild(grid);
  });
});
