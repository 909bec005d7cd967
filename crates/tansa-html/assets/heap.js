"use strict";
// The heap page. Data: see crates/tansa-html/src/heap_page.rs (HeapData).
T.run(function () {
  var D = T.data(), el = T.el, S = T.svg;
  var NB = D.buckets, BNS = D.bucket_ns;
  // The selected range of buckets, inclusive; null: everything.
  var range = null;
  document.body.setAttribute("data-buckets", NB);

  // Bytes and blocks the leak check at exit found lost (record --leak-check), or null.
  function lostAtExit() {
    var c = D.leaks && D.leaks.leak_check;
    if (!c) return null;
    var x = c.at_exit;
    return T.int(x.definite_bytes + x.indirect_bytes) + " B in " +
      T.int(x.definite_blocks + x.indirect_blocks) + " block(s) (section “Leak check at exit”)";
  }

  var p = D.process;
  T.summary([
    ["Recording", D.source],
    ["Command", (p.command || []).join(" ") || p.exe],
    ["Process", p.pid + " (" + p.exit.description + ")"],
    ["Processes", D.processes.length],
    ["Duration", T.ns(D.duration_ns)],
    ["Events", T.int(D.events)],
    ["Live at end", T.int(D.totals[0]) + " B"],
    ["Peak", T.int(D.totals[1]) + " B (" + T.bytes(D.totals[1]) + ")"],
    ["Allocated", T.int(D.totals[3]) + " B"],
    ["Freed", T.int(D.totals[4]) + " B"],
    ["Lost at exit", lostAtExit()],
    ["Charge", D.charge + ", releases to " + D.free_to]
  ].concat(D.sample_rate_bytes ? [["Sampled",
    "every figure is an estimate from allocations sampled every " +
    T.bytes(D.sample_rate_bytes) + " on average"]] : []));
  T.warnings(D.warnings);

  // ---- The heap over time per library (stacked), total and peak marked.
  var libs = D.kinds[0];
  function cumulative(series) {
    var out = new Array(NB), j = 0, c = 0;
    for (var b = 0; b < NB; b++) {
      while (j < series.length && series[j][0] <= b) { c = series[j][6]; j++; }
      out[b] = c;
    }
    return out;
  }
  var bands = [], rest = null;
  libs.units.forEach(function (u, i) {
    var c = cumulative(u.series);
    if (i < D.chart_bands) bands.push({ name: u.name, values: c });
    else if (!rest) rest = { name: "(others)", values: c.slice() };
    else c.forEach(function (v, b) { rest.values[b] += v; });
  });
  if (libs.others) {
    var oc = cumulative(libs.others.series);
    if (!rest) rest = { name: "(others)", values: oc };
    else oc.forEach(function (v, b) { rest.values[b] += v; });
  }
  if (rest) bands.push(rest);
  var total = new Array(NB).fill(0);
  bands.forEach(function (band) { band.values.forEach(function (v, b) { total[b] += v; }); });

  var chartSec = T.section("heap-over-time", "Heap over time per library",
    "Live bytes at the end of each of " + NB + " intervals of " + T.ns(BNS) +
    ". Drag across the chart to choose a time range: every table below then covers that range.");
  var W = 1100, H = 320, L = 80, R = 20, TOP = 20, BOT = 40;
  var pw = W - L - R, ph = H - TOP - BOT;
  var ymax = Math.max(1, D.totals[1], Math.max.apply(null, total.concat([0])));
  // Bucket b is drawn at its end; the line starts at 0 at the start of the recording.
  function x(b) { return Math.round((L + (b + 1) / NB * pw) * 10) / 10; }
  function y(v) { return Math.round((TOP + ph - Math.max(0, v) / ymax * ph) * 10) / 10; }
  var colors = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
    "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295", "#8cd17d", "#a0cbe8"];
  var chart = S("svg", { id: "heap-chart", viewBox: "0 0 " + W + " " + H, width: "100%", role: "img" });
  // Axes and grid.
  for (var k = 0; k <= 4; k++) {
    var v = ymax * k / 4;
    chart.appendChild(S("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "grid" }));
    chart.appendChild(S("text", { x: L - 6, y: y(v) + 4, class: "axis", "text-anchor": "end", text: T.bytes(Math.round(v)) }));
  }
  for (k = 0; k <= 5; k++) {
    chart.appendChild(S("text", { x: L + pw * k / 5, y: H - BOT + 18, class: "axis", "text-anchor": "middle", text: k ? T.ns(Math.round(NB * BNS * k / 5)) : "0" }));
  }
  var base = new Array(NB).fill(0);
  bands.forEach(function (band, i) {
    var top = band.values.map(function (v, b) { return base[b] + Math.max(0, v); });
    var pts = [L + "," + y(0)];
    for (var b = 0; b < NB; b++) pts.push(x(b) + "," + y(top[b]));
    for (b = NB - 1; b >= 0; b--) pts.push(x(b) + "," + y(base[b]));
    chart.appendChild(S("polygon", { points: pts.join(" "), fill: colors[i % colors.length], class: "band" },
      S("title", { text: band.name })));
    base = top;
  });
  var tl = [L + "," + y(0)];
  for (var bb = 0; bb < NB; bb++) tl.push(x(bb) + "," + y(total[bb]));
  chart.appendChild(S("polyline", { points: tl.join(" "), class: "total" }, S("title", { text: "total live bytes" })));
  // Peak: the recording's exact peak as a line, and the interval whose end was highest.
  var peakAt = total.indexOf(Math.max.apply(null, total.concat([0])));
  chart.appendChild(S("line", { x1: L, x2: W - R, y1: y(D.totals[1]), y2: y(D.totals[1]), class: "peak" }));
  chart.appendChild(S("text", { x: W - R - 4, y: y(D.totals[1]) - 5, "text-anchor": "end", class: "peak-label",
    text: "peak " + T.bytes(D.totals[1]) + " (" + T.int(D.totals[1]) + " B)" }));
  if (peakAt >= 0) chart.appendChild(S("circle", { cx: x(peakAt), cy: y(total[peakAt]), r: 4, class: "peak-dot" },
    S("title", { text: "highest at an interval end: " + T.int(total[peakAt]) + " B at " + T.ns((peakAt + 1) * BNS) })));
  var brush = S("rect", { x: L, y: TOP, width: 0, height: ph, class: "brush" });
  chart.appendChild(brush);
  var overlay = S("rect", { x: L, y: TOP, width: pw, height: ph, class: "overlay" });
  chart.appendChild(overlay);
  chartSec.appendChild(chart);
  var legend = el("div", { class: "legend" });
  bands.forEach(function (band, i) {
    legend.appendChild(el("span", null, el("i", { style: "background:" + colors[i % colors.length] }), band.name));
  });
  legend.appendChild(el("span", null, el("i", { class: "total-key" }), "total"));
  chartSec.appendChild(legend);
  var rangeText = el("span", { id: "range" });
  var reset = el("button", { type: "button", text: "Whole recording", onclick: function () { setRange(null); } });
  chartSec.appendChild(el("p", { class: "range" }, "Time range: ", rangeText, " ", reset));

  function bucketAt(evt) {
    var r = chart.getBoundingClientRect();
    var px = (evt.clientX - r.left) / r.width * W;
    var b = Math.floor((px - L) / pw * NB);
    return Math.max(0, Math.min(NB - 1, b));
  }
  var dragFrom = null;
  overlay.addEventListener("mousedown", function (e) { dragFrom = bucketAt(e); e.preventDefault(); });
  window.addEventListener("mousemove", function (e) {
    if (dragFrom === null) return;
    var b = bucketAt(e);
    drawBrush([Math.min(dragFrom, b), Math.max(dragFrom, b)]);
  });
  window.addEventListener("mouseup", function (e) {
    if (dragFrom === null) return;
    var b = bucketAt(e);
    var r = [Math.min(dragFrom, b), Math.max(dragFrom, b)];
    dragFrom = null;
    setRange(r[0] === 0 && r[1] === NB - 1 ? null : r);
  });
  function drawBrush(r) {
    if (!r) { brush.setAttribute("width", 0); return; }
    var x0 = L + r[0] / NB * pw, x1 = x(r[1]);
    brush.setAttribute("x", x0);
    brush.setAttribute("width", Math.max(1, x1 - x0));
  }

  // ---- Unit tables, filtered by the range.
  // The figures of a unit over the range: [net, peak, min(unknown), allocated, freed, calls,
  // temporary allocations].
  function inRange(u, others) {
    if (!range) return u.total;
    var t = [0, null, null, 0, 0, 0, 0], any = false;
    u.series.forEach(function (s) {
      if (s[0] < range[0] || s[0] > range[1]) return;
      any = true;
      t[0] += s[1]; t[3] += s[3]; t[4] += s[4]; t[5] += s[5]; t[6] += s[7];
      if (!others) {
        var peak = s[6] - s[1] + s[2];
        t[1] = t[1] === null ? peak : Math.max(t[1], peak);
      }
    });
    return any ? t : null;
  }
  function statColumns(first) {
    return first.concat([
      { label: "net bytes", num: true, get: function (r) { return r.t[0]; }, fmt: T.int, title: "allocated minus freed (in the range)" },
      { label: "peak bytes", num: true, get: function (r) { return r.t[1]; }, fmt: T.int, title: "highest live bytes (in the range, at interval granularity)" },
      { label: "allocated", num: true, get: function (r) { return r.t[3]; }, fmt: T.int },
      { label: "freed", num: true, get: function (r) { return r.t[4]; }, fmt: T.int },
      { label: "calls", num: true, get: function (r) { return r.t[5]; }, fmt: T.int }
    ]).concat(D.sample_rate_bytes ? [] : [
      { label: "temporary", num: true, get: function (r) { return r.t[6]; }, fmt: T.int, title: "allocations released by their own thread before it allocated again: heap churn a local variable or a reused buffer would avoid" }
    ]);
  }
  // The leak check at exit, per unit (record --leak-check): made at the end, so shown for a
  // range that reaches it.
  var unitLost = D.kinds.some(function (k) { return k.units.some(function (u) { return u.at_exit; }); });
  function lostShown(r) {
    return r.u.at_exit && !(r.others && D.charge === "all") && (!range || range[1] >= NB - 1);
  }
  var lostColumn = {
    label: "lost at exit", num: true,
    title: "bytes the leak check at exit found lost, definitely or indirectly (blocks in parentheses); " +
      "shown when the range reaches the end, where the check is made",
    get: function (r) { return lostShown(r) ? r.u.at_exit.definite_bytes + r.u.at_exit.indirect_bytes : -1; },
    fmt: function (v, r) {
      if (!lostShown(r)) return r.u.at_exit ? "–" : "";
      return T.int(v) + " (" + T.int(r.u.at_exit.definite_blocks + r.u.at_exit.indirect_blocks) + ")";
    }
  };
  var titles = { library: "By library", "function": "By function", thread: "By thread" };
  var tables = [];
  D.kinds.forEach(function (kind) {
    var sec = T.section("by-" + kind.kind, titles[kind.kind],
      kind.count > kind.units.length ? "The " + kind.units.length + " largest of " + kind.count +
        " units; the others are summed in one row." : null);
    var first = [{ label: kind.kind, get: function (r) { return r.u.name; }, cls: "name" }];
    if (kind.kind === "thread") first.push({ label: "pid", num: true, get: function (r) { return r.u.thread ? r.u.thread.pid : null; } });
    var tab = T.table(statColumns(first).concat(unitLost ? [lostColumn] : []), [], { sort: first.length, desc: true, rowClass: function (r) { return r.others ? "others" : null; } });
    sec.appendChild(tab.el);
    tables.push(function () {
      var rows = [];
      kind.units.forEach(function (u) { var t = inRange(u, false); if (t) rows.push({ u: u, t: t }); });
      if (kind.others) { var t = inRange(kind.others, true); if (t) rows.push({ u: kind.others, t: t, others: true }); }
      tab.update(rows);
    });
  });

  var callSec = T.section("by-call", "By call",
    "A call is a run of consecutive events charged to the same library; " +
    (D.call_count > D.calls.length ? "The " + D.calls.length + " largest (by peak) of " + T.int(D.call_count) + " calls; " : "") +
    "in a time range, the calls that overlap it with their whole figures.");
  var callTab = T.table(statColumns([
    { label: "library", get: function (r) { return r.c.library; }, cls: "name" },
    { label: "call", num: true, get: function (r) { return r.c.index; } },
    { label: "start", num: true, get: function (r) { return r.c.start_ns; }, fmt: T.ns },
    { label: "end", num: true, get: function (r) { return r.c.end_ns; }, fmt: T.ns }
  ]), [], { sort: 5, desc: true });
  callSec.appendChild(callTab.el);
  tables.push(function () {
    var t0 = range ? range[0] * BNS : 0, t1 = range ? (range[1] + 1) * BNS : Infinity;
    callTab.update(D.calls.filter(function (c) { return c.end_ns >= t0 && c.start_ns < t1; })
      .map(function (c) { return { c: c, t: c.total }; }));
  });

  function setRange(r) {
    range = r;
    drawBrush(r);
    rangeText.textContent = r ? T.ns(r[0] * BNS) + " to " + T.ns((r[1] + 1) * BNS) : "the whole recording";
    document.body.setAttribute("data-range", r ? r[0] + "-" + r[1] : "all");
    tables.forEach(function (f) { f(); });
  }
  // A range can be given in the address: page.html#range=FIRST-LAST (bucket numbers).
  var m = /range=(\d+)-(\d+)/.exec(location.hash);
  setRange(m ? [Math.min(+m[1], NB - 1), Math.min(Math.max(+m[1], +m[2]), NB - 1)] : null);

  // ---- Flame graphs.
  T.flameGraphs(D.flame_graphs);

  // ---- The leak check at exit (record --leak-check), as Valgrind's leak summary reads.
  var LC = D.leaks && D.leaks.leak_check;
  if (LC) {
    var X = LC.at_exit;
    var checkSec = T.section("leak-check", "Leak check at exit",
      "Of the blocks still allocated when " + T.int(LC.images_checked) + " process image(s) called exit" +
      (LC.images_not_checked ? " (" + T.int(LC.images_not_checked) +
        " more not checked: they ended otherwise, by a signal, _exit or exec)" : "") +
      ": lost when no pointer to them is left in the program's globals, stacks or reachable blocks. " +
      "Column “lost at exit” of the leak sites says where they were allocated; that of the " +
      "tables by library, function and thread, which units they are charged to.");
    var checkRows = [
      ["definitely lost", X.definite_bytes, X.definite_blocks],
      ["indirectly lost", X.indirect_bytes, X.indirect_blocks],
      ["still reachable", X.reachable_bytes, X.reachable_blocks]
    ];
    if (X.released_blocks) checkRows.push(["freed by the C library unseen (not lost)", X.released_bytes, X.released_blocks]);
    checkSec.appendChild(T.table([
      { label: "blocks at exit", get: function (r) { return r[0]; } },
      { label: "bytes", num: true, get: function (r) { return r[1]; }, fmt: T.int },
      { label: "blocks", num: true, get: function (r) { return r[2]; }, fmt: T.int }
    ], checkRows).el);
  }

  // ---- Leak sites.
  var leakSec = T.section("leaks", "Leak sites");
  if (!D.leaks) {
    leakSec.appendChild(el("p", { class: "none", text: "No leak report was made." }));
  } else {
    var L2 = D.leaks;
    T.warnings(L2.warnings, leakSec);
    if (L2.folded > 0) leakSec.appendChild(el("p", { class: "note", text: L2.folded + " site(s) repeat a site listed here, with the same stack in another run of the same program or through a call path that looks the same, and are folded into it (column “repeats”)." }));
    if (D.leak_site_count - L2.folded > L2.sites.length) leakSec.appendChild(el("p", { class: "note", text: "The " + L2.sites.length + " sites with most bytes leaked (with their repeats) of " + (D.leak_site_count - L2.folded) + "." }));
    function place(c) { return c.function + (c.file ? " (" + c.file + ":" + c.line + ")" : ""); }
    var leakRows = L2.sites.filter(function (s) { return s.judgement !== "freed"; });
    leakSec.appendChild(T.table([
      { label: "#", num: true, get: function (s) { return s.index; } },
      { label: "pid", num: true, get: function (s) { return s.pid; } },
      { label: "program", get: function (s) { return (s.exe || "").split("/").pop(); } },
      { label: "site", get: function (s) { return place(s.site); }, cls: "name",
        fmt: function (v, s) {
          return el("details", null, el("summary", { text: v }),
            el("ol", { class: "stack" }, s.stack.map(function (f) { return el("li", { text: place(f) }); })));
        } },
      { label: "judgement", get: function (s) { return s.judgement; } },
      { label: "allocations", num: true, get: function (s) { return s.allocations; }, fmt: T.int },
      { label: "frees", num: true, get: function (s) { return s.frees; }, fmt: T.int },
      { label: "leaked blocks", num: true, get: function (s) { return s.leaked_blocks; }, fmt: T.int },
      { label: "leaked bytes", num: true, get: function (s) { return s.leaked_bytes; }, fmt: T.int },
      { label: "with repeats", num: true, title: "leaked bytes of the site and of the sites that repeat it (column “repeats”)",
        get: function (s) { return s.leaked_bytes + (s.repeats ? s.repeats.leaked_bytes : 0); }, fmt: T.int }
    ].concat(LC ? [
      { label: "lost at exit", num: true, title: "bytes of the site the leak check at exit found lost, definitely or indirectly (blocks in parentheses)",
        get: function (s) { return s.at_exit ? s.at_exit.definite_bytes + s.at_exit.indirect_bytes : -1; },
        fmt: function (v, s) {
          if (!s.at_exit) return "not checked";
          return T.int(v) + " (" + T.int(s.at_exit.definite_blocks + s.at_exit.indirect_blocks) + ")";
        } }
    ] : []).concat([
      { label: "diagnosis", get: function (s) {
          var parts = [];
          if (s.cause_functions.length) parts.push("leaking paths part in " + s.cause_functions.map(place).join(", "));
          s.cause_branches.forEach(function (b) {
            parts.push("branch " + b.instruction + " in " + b.function + " (" + b.file + ":" + b.line + ") " +
              (b.taken_on_leak ? "taken" : "not taken") + " on the leaking path");
          });
          if (s.tracing) parts.push("tracing: " + s.tracing);
          return parts.join("; ") || (L2.leak_cause ? "not traced" : "(record with --leak-cause for a diagnosis)");
        } },
      { label: "repeats", num: true,
        get: function (s) { return s.repeats ? s.repeats.in_other_images + s.repeats.in_same_image : 0; },
        fmt: function (v, s) {
          if (!s.repeats) return "";
          var r = s.repeats, where = [];
          if (r.in_other_images) where.push(r.in_other_images + " more process image(s) of " + (s.exe || "").split("/").pop());
          if (r.in_same_image) where.push(r.in_same_image + " more call path(s) of this process that look the same");
          var more = v > r.indexes.length ? ", …" : "";
          return "in " + where.join(" and ") + " (#" + r.indexes.join(", #") + more + "): " +
            T.int(r.leaked_blocks) + " block(s), " + T.int(r.leaked_bytes) + " byte(s)";
        } }
    ]), leakRows, { sort: LC ? 10 : 9, desc: true, empty: "no leaking site" }).el);
  }

  // ---- Improper use.
  var impSec = T.section("improper", "Improper use", "free or realloc of a pointer that was never allocated.");
  impSec.appendChild(T.table([
    { label: "call", get: function (i) { return i.op; } },
    { label: "times", num: true, get: function (i) { return i.count; }, fmt: T.int },
    { label: "pid", num: true, get: function (i) { return i.pid; } },
    { label: "pointer", get: function (i) { return i.ptr; } },
    { label: "refused", get: function (i) { return i.refused ? "yes" : "no"; } },
    { label: "events lost", num: true, get: function (i) { return i.lost_events || 0; }, fmt: function (v) {
        return v ? T.int(v) + " (the allocation may be one of them)" : "none";
      } },
    { label: "stack", get: function (i) { return i.stack.length ? (i.stack[0].function || i.stack[0].module) : ""; }, cls: "name",
      fmt: function (v, i) {
        return el("details", null, el("summary", { text: v }), el("ol", { class: "stack" }, i.stack.map(function (f) {
          return el("li", { text: (f.function || "?") + " in " + f.module + (f.file ? " (" + f.file + ":" + f.line + ")" : "") });
        })));
      } }
  ], D.improper, { sort: 1, desc: true, empty: "none found" }).el);

  // ---- Ranks of an MPI job (reports over several recordings or of a whole job).
  if (D.job && D.job.ranks.length) {
    var J = D.job;
    var first = J.first_ended === undefined ? null : J.first_ended;
    var rankSec = T.section("ranks", "Ranks",
      J.ranks.length + (J.size ? " of " + J.size : "") + " ranks recorded" + (J.id ? " (job " + J.id + ")" : "") +
      ", in " + J.recordings + " recording(s)" +
      (first === null ? "" : "; rank " + first + " ended first") +
      (J.clock === "wall-clock" ? "; the hosts' timelines are aligned by each recording's wall-clock start" : "") + ".");
    rankSec.appendChild(T.table([
      { label: "rank", num: true, get: function (r) { return r.rank; } },
      { label: "host", get: function (r) { return r.host; } },
      { label: "pid", num: true, get: function (r) { return r.pid; } },
      { label: "peak", num: true, get: function (r) { return r.peak_bytes; }, fmt: T.bytes },
      { label: "net at its end", num: true, get: function (r) { return r.net_bytes; }, fmt: T.bytes },
      { label: "allocated", num: true, get: function (r) { return r.allocated_bytes; }, fmt: T.bytes },
      { label: "end", get: function (r) { return (r.rank === first ? "first: " : "") + r.exit.description; } }
    ], J.ranks, { sort: 0, desc: false, empty: "no rank" }).el);
  }

  // ---- Process tree.
  var procSec = T.section("processes", "Processes");
  var byParent = {}, pids = {};
  D.processes.forEach(function (q) { pids[q.pid] = true; });
  D.processes.forEach(function (q) {
    var parent = pids[q.ppid] && q.ppid !== q.pid ? q.ppid : 0;
    (byParent[parent] = byParent[parent] || []).push(q);
  });
  function tree(parent, depth) {
    var kids = byParent[parent];
    if (!kids || depth > 64) return null;
    var ul = el("ul", { class: "tree" });
    var seen = {};
    kids.forEach(function (q) {
      ul.appendChild(el("li", null,
        el("b", { text: String(q.pid) }),
        q.rank === undefined ? null : el("span", { class: "rank", text: " rank " + q.rank }),
        q.host ? el("span", { class: "host", text: " on " + q.host }) : null,
        " ", (q.command || []).join(" ") || q.exe,
        el("span", { class: "exit" + (q.exit.kind === "exited" && q.exit.code === 0 ? "" : " abnormal"), text: " — " + q.exit.description }),
        el("span", { class: "note", text: " (" + T.int(q.events) + " events" + (q.lost_events ? ", " + T.int(q.lost_events) + " lost" : "") + ")" }),
        seen[q.pid] ? null : tree(q.pid, depth + 1)));
      seen[q.pid] = true;
    });
    return ul;
  }
  procSec.appendChild(tree(0, 0) || el("p", { class: "none", text: "no process" }));
  if (D.unrecorded.length) {
    procSec.appendChild(el("h3", { text: "Not recorded" }));
    procSec.appendChild(el("ul", null, D.unrecorded.map(function (u) {
      return el("li", { text: u.pid + " " + (u.exe || "?") + ": " + u.reason });
    })));
  }
});
