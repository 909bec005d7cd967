"use strict";
// The leak-test page, drawn from the JSON report (docs/json/leaktest-report.v1.md).
T.run(function () {
  var D = T.data(), R = D.report, el = T.el, S = T.svg;
  var FAULT = { "1-a": true, "2": true, "3-a": true };
  function verdict(v) {
    return el("span", { class: "verdict " + (FAULT[v] ? "fault" : v === "no-growth" ? "ok" : ""), text: v });
  }
  var verdicts = Object.keys(R.summary.verdicts).map(function (k) { return k + ": " + R.summary.verdicts[k]; }).join(", ");
  T.summary([
    ["Plan", R.plan || D.source],
    ["Result", R.summary.fault ? "fault found (" + R.summary.fault_findings + " fault findings)" : "no fault"],
    ["Verdicts", verdicts],
    ["Runs", T.int(R.summary.runs)],
    ["Restarts", R.summary.restarts || null],
    ["Duration", T.ns(R.duration_ms * 1e6)],
    ["Thresholds", T.bytes(R.settings.threshold_memory_bytes) + " (memory), " + R.settings.threshold_fds + " descriptors"],
    ["tansa", R.tansa_version]
  ]);
  T.warnings(R.notes);

  var phaseColor = { "initial": "#4e79a7", "retest": "#f28e2b", "upper-limit": "#e15759", "max-value": "#76b7b2",
    "accelerated": "#59a14f", "idle": "#b07aa1" };
  var resField = { rss: "rss_bytes", pss: "pss_bytes", fds: "fds" };
  function fmtRes(res, v) { return res === "fds" ? T.int(v) : T.int(v) + " B"; }

  // Every measurement of a process: [t_ms, sample, run or null].
  function measurements(name) {
    var out = [];
    function add(snap, run) {
      if (!snap) return;
      snap.processes.forEach(function (s) { if (s.process === name) out.push([snap.t_ms, s, run]); });
    }
    R.runs.forEach(function (r) { add(r.before, r); add(r.after, r); });
    R.idle.forEach(function (snap) { add(snap, null); });
    out.sort(function (a, b) { return a[0] - b[0]; });
    return out;
  }

  function chart(name, res, points) {
    var W = 1100, H = 220, L = 90, RR = 20, TOP = 14, BOT = 34, pw = W - L - RR, ph = H - TOP - BOT;
    var f = resField[res];
    var t1 = Math.max(1, R.duration_ms);
    var vals = points.map(function (p) { return p[1][f]; });
    var lo = Math.min.apply(null, vals.concat([Infinity])), hi = Math.max.apply(null, vals.concat([-Infinity]));
    if (!isFinite(lo)) { lo = 0; hi = 1; }
    if (hi === lo) { hi += 1; lo = Math.max(0, lo - 1); }
    var pad = (hi - lo) * 0.1; lo = Math.max(0, lo - pad); hi += pad;
    function x(t) { return L + t / t1 * pw; }
    function y(v) { return TOP + ph - (v - lo) / (hi - lo) * ph; }
    var g = S("svg", { viewBox: "0 0 " + W + " " + H, width: "100%", class: "series-chart", "data-process": name, "data-resource": res });
    // Runs, coloured by phase.
    R.runs.forEach(function (r) {
      g.appendChild(S("rect", { x: x(r.start_ms), y: TOP, width: Math.max(1, x(r.end_ms) - x(r.start_ms)), height: ph,
        fill: phaseColor[r.phase] || "#999", class: "run" },
        S("title", { text: "run " + r.seq + ": " + r.item + " (" + r.phase + ", " + r.run_in_item + ")" + " " + r.outcome.status })));
    });
    for (var k = 0; k <= 3; k++) {
      var v = lo + (hi - lo) * k / 3;
      g.appendChild(S("line", { x1: L, x2: W - RR, y1: y(v), y2: y(v), class: "grid" }));
      g.appendChild(S("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "axis", text: res === "fds" ? (Number.isInteger(v) ? T.int(v) : v.toFixed(1)) : T.bytes(Math.round(v)) }));
    }
    for (k = 0; k <= 5; k++) {
      var t = t1 * k / 5;
      g.appendChild(S("text", { x: x(t), y: H - BOT + 16, "text-anchor": "middle", class: "axis", text: T.ns(Math.round(t * 1e6)) }));
    }
    g.appendChild(S("polyline", { class: "series", points: points.map(function (p) { return x(p[0]) + "," + y(p[1][f]); }).join(" ") }));
    points.forEach(function (p) {
      g.appendChild(S("circle", { cx: x(p[0]), cy: y(p[1][f]), r: 2.5, class: "pt" },
        S("title", { text: fmtRes(res, p[1][f]) + " at " + p[0] + " ms" + (p[2] ? ", run " + p[2].seq + " (" + p[2].item + ", " + p[2].phase + ")" : ", idle test") })));
    });
    return g;
  }

  function seriesTable(f) {
    return T.table([
      { label: "run", num: true, get: function (s) { return s.run; } },
      { label: "phase", get: function (s) { return s.phase; } },
      { label: "params", get: function (s) { return Object.keys(s.params).map(function (k) { return k + "=" + s.params[k]; }).join(" "); } },
      { label: "before", num: true, get: function (s) { return s.before; }, fmt: T.int },
      { label: "after", num: true, get: function (s) { return s.after; }, fmt: T.int },
      { label: "growth", num: true, get: function (s) { return s.growth; }, fmt: T.int },
      { label: "grew", get: function (s) { return s.grew ? "yes" : "no"; } }
    ], f.series, { cls: "series-table" }).el;
  }

  var legend = el("div", { class: "legend" });
  Object.keys(phaseColor).forEach(function (k) { legend.appendChild(el("span", null, el("i", { style: "background:" + phaseColor[k] }), k)); });

  var ps = T.section("processes", "Watched processes",
    "Each resource's measurements over the session; the shaded spans are the runs, coloured by phase.");
  ps.appendChild(legend);
  R.processes.forEach(function (p) {
    var box = el("div", { class: "process", "data-process": p.name });
    box.appendChild(el("h3", null, p.name + " ", verdict(p.verdict)));
    box.appendChild(el("p", { class: "reason", text: p.reason }));
    box.appendChild(el("p", { class: "note", text: "pids: " + p.instances.map(function (i) { return i.pid; }).join(", ") +
      (p.noise.length ? "; noise: " + p.noise.map(function (n) { return n.resource + " median spread " + T.int(n.median_spread) + (n.warning ? " (" + n.warning + ")" : ""); }).join(", ") : "") }));
    var pts = measurements(p.name);
    R.settings.judge.forEach(function (res) {
      box.appendChild(el("h4", { text: res }));
      box.appendChild(chart(p.name, res, pts));
    });
    var fi = p.findings.map(function (i) { return R.findings[i]; });
    fi.forEach(function (f) {
      var d = el("details", { class: "finding", open: FAULT[f.verdict] ? "" : null });
      d.appendChild(el("summary", null, verdict(f.verdict), " " + f.item + (f.resource ? " / " + f.resource : "") + " — " + f.cause + ": " + f.reason));
      if (f.series.length) d.appendChild(seriesTable(f));
      if (f.log_ids.length) d.appendChild(el("p", { class: "note", text: "log ids: " + f.log_ids.join(", ") }));
      box.appendChild(d);
    });
    ps.appendChild(box);
  });

  var is = T.section("items", "Test items");
  var procs = R.processes.map(function (p) { return p.name; });
  is.appendChild(T.table([
    { label: "item", get: function (i) { return i.name; }, cls: "name" },
    { label: "runs", num: true, get: function (i) { return i.runs; } },
    { label: "by phase", get: function (i) { return Object.keys(i.runs_by_phase).map(function (k) { return k + " " + i.runs_by_phase[k]; }).join(", "); } }
  ].concat(procs.map(function (name) {
    return { label: name, get: function (i) {
      var r = i.results.filter(function (x) { return x.process === name; })[0];
      return r ? r.verdict : null;
    }, fmt: function (v) { return v ? verdict(v) : "—"; } };
  })), R.items).el);

  if (R.restarts.length) {
    var rs = T.section("restarts", "Restarts");
    rs.appendChild(el("ul", null, R.restarts.map(function (r) {
      return el("li", { text: r.process + " at " + r.t_ms + " ms: " + r.why + (r.error ? " (" + r.error + ")" : "") });
    })));
  }
});
