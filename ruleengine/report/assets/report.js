/* autofusion report.html: renders the embedded document (#af-data) in place.
   Plain JS and SVG, no library: cards are built a page at a time, pictures on demand. */
(function () {
  "use strict";
  performance.mark("af-start");
  var source = document.getElementById("af-data");
  if (source.getAttribute("data-encoding") !== "gzip+base64") {
    render(JSON.parse(source.textContent));
  } else if (typeof DecompressionStream === "undefined") {
    document.getElementById("cards").textContent =
      "This browser cannot unpack the page's data (no DecompressionStream): use a browser from 2023 on.";
  } else {
    /* the document is gzipped (a fifth of the size: the page of a 10^5-node graph opens
       in well under a second), unpacked by the browser's own DecompressionStream */
    var bin = atob(source.textContent), bytes = new Uint8Array(bin.length);
    for (var b = 0; b < bin.length; b++) bytes[b] = bin.charCodeAt(b);
    new Response(new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip")))
      .text().then(function (text) { render(JSON.parse(text)); });
  }

  function render(D) {
    performance.mark("af-parsed");
    var SVGNS = "http://www.w3.org/2000/svg";
    var PAGE = 25;
    var state = { page: 0, rule: "", list: D.groups };
    var groupIndex = {};
    D.groups.forEach(function (a, i) { groupIndex[a[0]] = i; });

    /* a group is an array (data.py ``_group``): named fields when its card is drawn */
    function G(a) {
      return { id: a[0], rule: D.labels[a[1]], kernel: D.labels[a[2]], op: D.labels[a[3]], fused: a[4],
        before: a[5], after: a[6], saved: a[7], net: a[8], acc: a[9], ub: a[10], pic: a[11],
        lost: a[12], lostCount: a[13] };
    }

    function el(tag, attrs, text) {
      var e = document.createElement(tag);
      if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
      if (text != null) e.textContent = text;
      return e;
    }
    function sv(tag, attrs, text) {
      var e = document.createElementNS(SVGNS, tag);
      if (attrs) for (var k in attrs) e.setAttribute(k, attrs[k]);
      if (text != null) e.textContent = text;
      return e;
    }
    function bytes(n) {
      if (n == null) return "?";
      var v = Math.abs(n), sign = n < 0 ? "-" : "", units = ["B", "KiB", "MiB", "GiB"];
      for (var i = 0; i < units.length; i++) {
        if (v < 1024 || i === units.length - 1)
          return i === 0 ? sign + Math.floor(v) + " B" : sign + v.toFixed(1) + " " + units[i];
        v /= 1024;
      }
    }
    function num(n) { return n == null ? "?" : String(n).replace(/\B(?=(\d{3})+(?!\d))/g, ","); }
    function title(e, text) { var t = sv("title", null, text); e.appendChild(t); return e; }

    /* ---------------------------------------------------------------- charts */
    function barChart(host, rows, opts) {
      var n = rows.length, max = 1;
      rows.forEach(function (r) { max = Math.max(max, r[1], r[2]); });
      var left = 60, top = 10, h = 180, bw = Math.max(6, Math.min(22, Math.floor(860 / Math.max(1, n) / 2.6)));
      var step = bw * 2 + Math.max(4, Math.floor(bw * 0.8));
      var width = left + n * step + 20, height = top + h + (opts.rotate ? 90 : 40);
      var svg = sv("svg", { width: width, height: height, viewBox: "0 0 " + width + " " + height, role: "img" });
      for (var t = 0; t <= 4; t++) {
        var y = top + h - (h * t) / 4;
        svg.appendChild(sv("line", { x1: left - 4, x2: width - 10, y1: y, y2: y, "class": "axis" }));
        svg.appendChild(sv("text", { x: left - 6, y: y + 4, "text-anchor": "end" }, bytes((max * t) / 4)));
      }
      rows.forEach(function (r, i) {
        var x = left + i * step, hb = (h * r[1]) / max, ha = (h * Math.max(0, r[2])) / max;
        title(svg.appendChild(sv("rect", { x: x, y: top + h - hb, width: bw, height: hb, "class": "bb" })),
          r[0] + ": before " + bytes(r[1]) + " (" + num(r[1]) + " B)");
        title(svg.appendChild(sv("rect", { x: x + bw, y: top + h - ha, width: bw, height: ha, "class": "ba" })),
          r[0] + ": after " + bytes(r[2]) + " (" + num(r[2]) + " B)");
        var every = Math.max(1, Math.ceil(n / 32));
        if (i % every === 0) {
          var lx = x + bw, ly = top + h + 12;
          var label = sv("text", opts.rotate
            ? { x: lx, y: ly, transform: "rotate(45 " + lx + " " + ly + ")" }
            : { x: lx, y: ly, "text-anchor": "middle" }, r[0]);
          svg.appendChild(label);
        }
      });
      host.appendChild(svg);
    }

    function renderCharts() {
      var byOp = D.traffic.byOp, byLayer = D.traffic.byLayer;
      barChart(document.getElementById("chart-op"), byOp, { rotate: true });
      var axis = byLayer.axis === "layer" ? "layer" : "graph position (nodes in topological order)";
      document.getElementById("chart-layer-title").textContent =
        "HBM traffic by " + axis + (byLayer.width > 1 ? ", " + byLayer.width + " per bar" : "");
      barChart(document.getElementById("chart-layer"), byLayer.bars, { rotate: true });
    }

    /* ---------------------------------------------------------------- group picture */
    function picture(g) {
      var p = g.pic, k = p.n.length, depth = new Array(k), row = [], cols = {};
      for (var i = 0; i < k; i++) depth[i] = 0;
      p.e.forEach(function (e) { if (e[0] < e[1]) depth[e[1]] = Math.max(depth[e[1]], depth[e[0]] + 1); });
      for (i = 0; i < k; i++) { cols[depth[i]] = (cols[depth[i]] || 0); row[i] = cols[depth[i]]++; }
      var W = 168, H = 78, bw = 108, bh = 26, oy = 24, ncol = 0, nrow = 1;
      for (i = 0; i < k; i++) { ncol = Math.max(ncol, depth[i] + 1); nrow = Math.max(nrow, row[i] + 1); }
      var width = ncol * W + 20, height = nrow * H + 8;
      var svg = sv("svg", { width: width, height: height, viewBox: "0 0 " + width + " " + height, role: "img" });
      function bx(i) { return 10 + depth[i] * W; }
      function by(i) { return 4 + row[i] * H + oy; }
      p.e.forEach(function (e) {
        var x1 = bx(e[0]) + bw, y1 = by(e[0]) + bh / 2, x2 = bx(e[1]), y2 = by(e[1]) + bh / 2;
        if (x2 <= x1) { x1 = bx(e[0]) + bw / 2; y1 = by(e[0]) + bh; x2 = bx(e[1]) + bw / 2; y2 = by(e[1]); }
        var mx = (x1 + x2) / 2;
        title(svg.appendChild(sv("path", { d: "M" + x1 + "," + y1 + " C" + mx + "," + y1 + " " + mx + "," + y2 + " " + x2 + "," + y2, "class": "chip" })),
          D.nodes[p.n[e[0]]] + " \u2192 " + D.nodes[p.n[e[1]]] + ": " + bytes(e[2]) + ", stays on chip");
        svg.appendChild(sv("text", { x: mx, y: (y1 + y2) / 2 - 3, "text-anchor": "middle", "class": "tchip" }, bytes(e[2])));
      });
      var reads = {}, writes = {};
      p.r.forEach(function (r) { (reads[r[0]] = reads[r[0]] || []).push(r); });
      p.w.forEach(function (w) { (writes[w[0]] = writes[w[0]] || []).push(w); });
      for (i = 0; i < k; i++) {
        var x = bx(i), y = by(i), name = D.nodes[p.n[i]], op = D.ops[D.nodeOp[p.n[i]]];
        var box = svg.appendChild(sv("rect", { x: x, y: y, width: bw, height: bh, rx: 4, "class": "box" }));
        title(box, name + " (" + op + ")");
        svg.appendChild(sv("text", { x: x + bw / 2, y: y + 17, "text-anchor": "middle", "class": "op" }, op.length > 16 ? op.slice(0, 15) + "…" : op));
        if (reads[i]) {
          var rb = 0, known = true, ws = 0, lines = [];
          reads[i].forEach(function (r) { if (r[1] == null) known = false; else rb += r[1]; ws += r[3]; lines.push(D.tensors[r[2]] + " " + bytes(r[1]) + (r[3] ? " (weight)" : "")); });
          title(svg.appendChild(sv("path", { d: "M" + (x + 14) + "," + (y - 20) + " L" + (x + 14) + "," + y, "class": "hbm" })), "read from HBM:\n" + lines.join("\n"));
          svg.appendChild(sv("text", { x: x + 20, y: y - 8, "class": "thbm" }, "in " + (known ? bytes(rb) : bytes(rb) + "+?") + (ws ? " (" + ws + "w)" : "")));
        }
        if (writes[i]) {
          var wb = 0, wk = true, wl = [];
          writes[i].forEach(function (w) { if (w[1] == null) wk = false; else wb += w[1]; wl.push("output of " + D.nodes[p.n[w[0]]] + ": " + bytes(w[1])); });
          title(svg.appendChild(sv("path", { d: "M" + (x + bw - 14) + "," + (y + bh) + " L" + (x + bw - 14) + "," + (y + bh + 20), "class": "hbm" })), "written to HBM:\n" + wl.join("\n"));
          svg.appendChild(sv("text", { x: x + bw - 20, y: y + bh + 16, "text-anchor": "end", "class": "thbm" }, "out " + (wk ? bytes(wb) : bytes(wb) + "+?")));
        }
      }
      return svg;
    }

    /* ---------------------------------------------------------------- cards */
    function card(g) {
      var c = el("div", { "class": "card", id: "group-" + g.id, "data-group": g.id });
      c.appendChild(el("h3", null, "Group " + g.id + ": " + g.rule + " \u2192 " + g.op + " (kernel " + g.kernel + ")"));
      var acc = g.acc ? g.acc[0] + " \u2192 " + g.acc[1] + " HBM accesses, " : "";
      var ub = g.ub ? ", UB " + bytes(g.ub[0]) + " of " + bytes(g.ub[1]) : "";
      c.appendChild(el("div", { "class": "meta" }, g.pic.n.length + " nodes, " + acc + bytes(g.before) + " \u2192 " +
        bytes(g.after) + ", gross saved " + bytes(g.saved) + ", net " + bytes(g.net) + ub +
        (g.fused ? ", fused node " + g.fused : "")));
      var pic = el("div", { "class": "pic" });
      pic.appendChild(picture(g));
      c.appendChild(pic);
      var names = g.pic.n.map(function (i) { return D.nodes[i]; });
      var d = el("details");
      d.appendChild(el("summary", null, "nodes"));
      d.appendChild(el("div", { "class": "nodes" }, names.join(", ")));
      c.appendChild(d);
      if (g.lostCount) {
        var l = el("details", { open: "" });
        l.appendChild(el("summary", null, g.lostCount + " candidate" + (g.lostCount > 1 ? "s" : "") + " lost to this group" +
          (g.lostCount > g.lost.length ? " (first " + g.lost.length + " shown)" : "") +
          (D.detail === "full" ? "" : " among those the plan lists (--plan-detail full: all)")));
        var t = el("table");
        g.lost.forEach(function (x) {
          var tr = el("tr");
          tr.appendChild(el("td", null, x[0]));
          tr.appendChild(el("td", { "class": "nodes" }, x[1].length > 4 ? x[1].slice(0, 4).join(", ") + ", \u2026 (" + x[1].length + ")" : x[1].join(", ")));
          tr.appendChild(el("td", null, x[2]));
          t.appendChild(tr);
        });
        l.appendChild(t);
        c.appendChild(l);
      }
      return c;
    }

    function pages() { return Math.max(1, Math.ceil(state.list.length / PAGE)); }

    function showPage(p) {
      state.page = Math.max(0, Math.min(pages() - 1, p));
      var host = document.getElementById("cards");
      host.textContent = "";
      var frag = document.createDocumentFragment();
      state.list.slice(state.page * PAGE, (state.page + 1) * PAGE).forEach(function (a) { frag.appendChild(card(G(a))); });
      host.appendChild(frag);
      document.getElementById("page-info").textContent = "page " + (state.page + 1) + " of " + pages() +
        " (" + state.list.length + " of " + D.groups.length + " groups)";
      return host.querySelectorAll(".card").length;
    }

    function filterRule(rule) {
      state.rule = rule;
      state.list = rule ? D.groups.filter(function (a) { return D.labels[a[1]] === rule; }) : D.groups;
      showPage(0);
    }

    function showGroup(id) {
      if (state.rule) filterRule("");
      var i = groupIndex[id];
      if (i == null) return;
      showPage(Math.floor(i / PAGE));
      var c = document.getElementById("group-" + id);
      if (c) { c.classList.add("hl"); c.scrollIntoView(); }
    }

    function renderPager() {
      var sel = document.getElementById("rule-filter");
      var seen = {};
      D.groups.forEach(function (a) { var r = D.labels[a[1]]; seen[r] = (seen[r] || 0) + 1; });
      Object.keys(seen).sort().forEach(function (r) { sel.appendChild(el("option", { value: r }, r + " (" + seen[r] + ")")); });
      sel.addEventListener("change", function () { filterRule(sel.value); });
      document.getElementById("prev").addEventListener("click", function () { showPage(state.page - 1); });
      document.getElementById("next").addEventListener("click", function () { showPage(state.page + 1); });
      var go = document.getElementById("goto");
      go.addEventListener("change", function () { showGroup(parseInt(go.value, 10)); });
    }

    /* ---------------------------------------------------------------- rejections */
    function renderRejections(hostId, rows, empty) {
      var host = document.getElementById(hostId);
      if (!rows.length) { host.appendChild(el("p", { "class": "muted" }, empty)); return; }
      rows.forEach(function (entry) {
        var d = el("details");
        d.appendChild(el("summary", null, entry[0] + " (" + entry[2] + " listed" +
          (entry[2] > entry[1].length ? ", first " + entry[1].length + " shown" : "") + ")"));
        var t = el("table");
        entry[1].forEach(function (x) {
          var tr = el("tr");
          tr.appendChild(el("td", null, x[0]));
          tr.appendChild(el("td", { "class": "nodes" }, x[1].length > 4 ? x[1].slice(0, 4).join(", ") + ", \u2026 (" + x[1].length + ")" : x[1].join(", ")));
          tr.appendChild(el("td", null, x[2]));
          t.appendChild(tr);
        });
        d.appendChild(t);
        host.appendChild(d);
      });
    }

    /* ---------------------------------------------------------------- search */
    function renderSearch() {
      var box = document.getElementById("search"), out = document.getElementById("found"), timer = null;
      function run() {
        var q = box.value.trim().toLowerCase();
        out.textContent = "";
        if (!q) return;
        var hits = [], total = 0;
        for (var i = 0; i < D.nodes.length; i++) {
          if (D.nodes[i].toLowerCase().indexOf(q) >= 0) { total++; if (hits.length < 100) hits.push(i); }
        }
        out.appendChild(el("p", { "class": "muted" }, total + " node" + (total === 1 ? "" : "s") + " match" + (total > hits.length ? " (first " + hits.length + " shown)" : "")));
        var t = el("table");
        hits.forEach(function (i) {
          var tr = el("tr"), g = D.nodeGroup[i];
          tr.appendChild(el("td", { "class": "nodes" }, D.nodes[i]));
          tr.appendChild(el("td", null, D.ops[D.nodeOp[i]]));
          var td = el("td");
          if (g) {
            var a = el("a", { href: "#group-" + g }, "group " + g + " (" + D.labels[D.groups[groupIndex[g]][1]] + ")");
            a.addEventListener("click", function (ev) { ev.preventDefault(); showGroup(g); });
            td.appendChild(a);
          } else td.textContent = "not fused";
          tr.appendChild(td);
          t.appendChild(tr);
        });
        out.appendChild(t);
      }
      box.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(run, 120); });
      box.addEventListener("keydown", function (ev) { if (ev.key === "Enter") { clearTimeout(timer); run(); } });
    }

    renderCharts();
    renderPager();
    showPage(0);
    renderRejections("near", D.near, "No near miss listed.");
    renderRejections("notfused", D.notFused, "No other rejection listed.");
    renderSearch();
    window.AF = { showPage: showPage, pages: pages, showGroup: showGroup, filterRule: filterRule, groups: D.groups.length };
    performance.mark("af-ready");
    document.body.setAttribute("data-ready", "1");
  }
})();
