// memrepro report: charts (Plotly.js, shipped in assets/), table filters, texts and the per-query explorer.
// Data files are scripts that call MR.addRows / MR.addTexts: loaded with <script> tags, they work from file://,
// where fetch() of a local file does not.
"use strict";
(function () {
  const MR = (window.MR = window.MR || {});
  MR.texts = MR.texts || {};
  MR.rows = MR.rows || {};
  MR.addTexts = function (key, doc) { MR.texts[key] = doc; };
  MR.addRows = function (run, chunk, rows) { (MR.rows[run] = MR.rows[run] || [])[chunk] = rows; };

  function loadScript(src) {
    return new Promise(function (resolve, reject) {
      const s = document.createElement("script");
      s.src = src;
      s.onload = resolve;
      s.onerror = function () { reject(new Error("could not load " + src)); };
      document.head.appendChild(s);
    });
  }

  function el(tag, cls, text) {
    const node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = text;
    return node;
  }

  const number = new Intl.NumberFormat("en-US");

  // ---------------------------------------------------------------------------------------------- charts
  function drawCharts() {
    document.querySelectorAll("script[data-chart]").forEach(function (source) {
      const target = document.getElementById(source.dataset.chart);
      if (!target) return;
      if (!window.Plotly) {
        target.textContent = "The chart needs assets/plotly.min.js, which did not load.";
        return;
      }
      const spec = JSON.parse(source.textContent);
      target.textContent = "";
      const layout = Object.assign({
        font: { family: "-apple-system, BlinkMacSystemFont, 'Segoe UI', Roboto, Arial, sans-serif", size: 12 },
        paper_bgcolor: "#fff", plot_bgcolor: "#fff",
      }, spec.layout);
      window.Plotly.newPlot(target, spec.data, layout, { displaylogo: false, displayModeBar: false, responsive: true });
    });
  }

  // ---------------------------------------------------------------------------------------------- table filters
  function tableFilters() {
    document.querySelectorAll("input.table-filter").forEach(function (input) {
      input.addEventListener("input", function () {
        const needle = input.value.trim().toLowerCase();
        document.querySelectorAll(input.dataset.filter).forEach(function (table) {
          table.querySelectorAll("tbody tr").forEach(function (row) {
            row.hidden = needle !== "" && row.textContent.toLowerCase().indexOf(needle) < 0;
          });
        });
      });
    });
  }

  // ---------------------------------------------------------------------------------------------- texts
  function memoryText(texts, index) {
    if (!texts) return { text: "memory #" + index, id: "" };
    const id = texts.ids[index];
    const text = texts.texts ? texts.texts[index] : null;
    return { text: text === null || text === undefined ? id : text, id: id, hasText: text !== null && text !== undefined };
  }

  function fillTexts() {
    const holder = document.querySelector("[data-texts]");
    if (!holder) return;
    const texts = MR.texts[holder.dataset.texts];
    const note = document.querySelector(".texts-note");
    if (!texts) {
      if (note) note.textContent = "The text table did not load; memory ids are shown.";
      return;
    }
    if (texts.missing && note) note.textContent = "Texts need the benchmark data: " + texts.missing + ". Ids are shown.";
    document.querySelectorAll("[data-mem]").forEach(function (node) {
      const m = memoryText(texts, Number(node.dataset.mem));
      node.textContent = m.text;
      if (m.hasText) node.title = m.id;
    });
    document.querySelectorAll("[data-query]").forEach(function (node) {
      const text = texts.queries && texts.queries[node.dataset.query];
      if (text) node.textContent = text;
    });
  }

  // ---------------------------------------------------------------------------------------------- explorer
  function Explorer(root) {
    this.root = root;
    this.meta = JSON.parse(root.querySelector(".explorer-meta").textContent);
    this.base = root.dataset.root || "";
    this.page = 0;
    this.pageSize = 25;
    this.status = root.querySelector(".explorer-status");
    this.body = root.querySelector(".explorer-table tbody");
    this.loaded = false;
    this.loading = false;
  }

  Explorer.prototype.load = function () {
    if (this.loaded || this.loading) return;
    this.loading = true;
    const self = this;
    const meta = this.meta;
    this.status.textContent = "Loading " + number.format(meta.rows) + " queries…";
    let chain = loadScript(this.base + meta.texts).catch(function () { return null; });
    meta.chunks.forEach(function (chunk, i) {
      chain = chain.then(function () {
        self.status.textContent = "Loading queries: part " + (i + 1) + " of " + meta.chunks.length + "…";
        return loadScript(self.base + chunk);
      });
    });
    chain.then(function () { self.ready(); }, function (error) {
      self.status.textContent = "The per-query data did not load (" + error.message + ").";
      self.loading = false;
    });
  };

  Explorer.prototype.ready = function () {
    const meta = this.meta;
    const chunks = MR.rows[meta.key] || [];
    this.rows = [].concat.apply([], chunks.filter(Boolean));
    this.texts = MR.texts[meta.textKey] || null;
    const texts = this.texts;
    this.haystack = this.rows.map(function (row) {
      const parts = [row[1]];
      if (texts && texts.queries && texts.queries[row[1]]) parts.push(texts.queries[row[1]]);
      row[5].forEach(function (g) { parts.push(memoryText(texts, g[0]).text); });
      return parts.join(" \u0001 ").toLowerCase();
    });
    this.loaded = true;
    this.loading = false;
    const self = this;
    this.root.querySelectorAll(".explorer-controls select, .explorer-controls input").forEach(function (control) {
      control.addEventListener(control.tagName === "INPUT" ? "input" : "change", function () {
        self.page = 0;
        self.render();
      });
    });
    this.root.querySelector(".prev").addEventListener("click", function () { self.page -= 1; self.render(); });
    this.root.querySelector(".next").addEventListener("click", function () { self.page += 1; self.render(); });
    this.body.addEventListener("click", function (event) {
      const txt = event.target.closest(".txt");
      if (txt) txt.classList.toggle("open");
    });
    this.render();
  };

  Explorer.prototype.matching = function () {
    const category = this.root.querySelector(".f-category").value;
    const bucket = this.root.querySelector(".f-bucket").value;
    const needle = this.root.querySelector(".f-search").value.trim().toLowerCase();
    const sort = this.root.querySelector(".f-sort").value;
    const out = [];
    for (let i = 0; i < this.rows.length; i++) {
      const row = this.rows[i];
      if (category !== "" && row[2] !== Number(category)) continue;
      if (bucket !== "" && row[4] !== Number(bucket)) continue;
      if (needle && this.haystack[i].indexOf(needle) < 0) continue;
      out.push(i);
    }
    const rows = this.rows;
    const rank = function (i) { return rows[i][3] === null ? Infinity : rows[i][3]; };
    if (sort === "rank") out.sort(function (a, b) { return rank(a) - rank(b) || a - b; });
    if (sort === "-rank") out.sort(function (a, b) { return rank(b) - rank(a) || a - b; });
    return out;
  };

  Explorer.prototype.render = function () {
    const meta = this.meta;
    const found = this.matching();
    const pages = Math.max(1, Math.ceil(found.length / this.pageSize));
    this.page = Math.min(Math.max(this.page, 0), pages - 1);
    const first = this.page * this.pageSize;
    const shown = found.slice(first, first + this.pageSize);
    let line = found.length
      ? "Showing " + number.format(first + 1) + "–" + number.format(first + shown.length) + " of " +
        number.format(found.length) + " matching queries"
      : "No query matches";
    if (found.length !== this.rows.length) line += " (" + number.format(this.rows.length) + " in all)";
    if (!this.texts) line += ". The text table did not load: ids are shown.";
    else if (this.texts.missing) line += ". Texts need the benchmark data: " + this.texts.missing + "; ids are shown.";
    this.status.textContent = line + ".";
    this.status.dataset.matching = String(found.length);
    this.root.querySelector(".page").textContent = "page " + (this.page + 1) + " of " + pages;
    this.root.querySelector(".prev").disabled = this.page === 0;
    this.root.querySelector(".next").disabled = this.page >= pages - 1;
    const body = document.createDocumentFragment();
    const self = this;
    shown.forEach(function (i) { body.appendChild(self.rowElement(self.rows[i])); });
    this.body.textContent = "";
    this.body.appendChild(body);
  };

  Explorer.prototype.rowElement = function (row) {
    const meta = this.meta;
    const texts = this.texts;
    const tr = el("tr");
    // [split, query id, category, best gold rank, bucket, gold [[memory, rank]], top [[memory, score]], metric]
    const rankCell = el("td", "num");
    const badge = el("span", "rank", row[3] === null ? "—" : String(row[3]));
    badge.style.background = meta.colours[row[4]];
    rankCell.appendChild(badge);
    if (meta.buckets[row[4]] !== String(row[3])) rankCell.appendChild(el("div", "muted small", meta.buckets[row[4]]));
    tr.appendChild(rankCell);

    const query = el("td");
    const queryText = texts && texts.queries && texts.queries[row[1]];
    query.appendChild(el("div", "txt", queryText || row[1]));
    let detail = meta.categories[row[2]] + " · " + meta.splits[row[0]] + " · " + row[1];
    if (meta.metric && row[7] !== null && row[7] !== undefined) detail += " · " + meta.metric + " " + Number(row[7]).toFixed(3);
    query.appendChild(el("div", "muted small", detail));
    tr.appendChild(query);

    const gold = el("td");
    const goldSet = new Set();
    row[5].forEach(function (g) {
      goldSet.add(g[0]);
      const m = memoryText(texts, g[0]);
      const line = el("div", "txt gold", m.text);
      line.appendChild(el("span", "score", g[1] === null ? "(not retrieved)" : "(rank " + g[1] + ")"));
      if (m.hasText) line.title = m.id;
      gold.appendChild(line);
    });
    tr.appendChild(gold);

    const top = el("td");
    const list = el("ol", "hits");
    row[6].forEach(function (hit) {
      const m = memoryText(texts, hit[0]);
      const item = el("li", goldSet.has(hit[0]) ? "is-gold" : "");
      item.appendChild(el("span", "score", Number(hit[1]).toFixed(3)));
      const line = el("div", "txt", m.text);
      if (m.hasText) line.title = m.id;
      item.appendChild(line);
      list.appendChild(item);
    });
    top.appendChild(list);
    tr.appendChild(top);
    return tr;
  };

  function explorers() {
    document.querySelectorAll("details.explorer").forEach(function (node) {
      const explorer = new Explorer(node);
      node.addEventListener("toggle", function () { if (node.open) explorer.load(); });
      if (location.hash === "#explorer") node.open = true;
      if (node.open) explorer.load();
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    drawCharts();
    tableFilters();
    fillTexts();
    explorers();
  });
})();
