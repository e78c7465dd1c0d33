"use strict";
// The studio: the manifest in a text area, linted on every keystroke by
// bl-graph compiled to wasm (inline in this page), drawn when it is valid,
// and exported as YAML. Nothing is fetched; nothing leaves the page.
(async () => {
  const data = JSON.parse(document.getElementById("bl-studio").textContent);
  const $ = (id) => document.getElementById(id);
  const text = $("text"), gutter = $("gutter"), verdict = $("verdict"), format = $("format");
  const backdrop = $("backdrop");
  const enc = new TextEncoder(), dec = new TextDecoder();
  let linter;
  try {
    const bytes = Uint8Array.from(atob(data.linter), (c) => c.charCodeAt(0));
    linter = (await WebAssembly.instantiate(bytes, {})).instance.exports;
  } catch (e) {
    verdict.className = "bad";
    verdict.textContent = "The linter could not start in this browser, so nothing here is checked: " + e;
    return;
  }
  // Copies the text into the module, calls `fn`, and reads its answer.
  function call(fn, source, fmt, ...rest) {
    const input = enc.encode(source);
    const at = linter.bl_alloc(input.length);
    new Uint8Array(linter.memory.buffer, at, input.length).set(input);
    const len = linter[fn](at, input.length, fmt === "json" ? 1 : 0, ...rest);
    return dec.decode(new Uint8Array(linter.memory.buffer, linter.bl_result(), len));
  }
  const api = {
    lint: (source, fmt) => JSON.parse(call("bl_studio_lint", source, fmt)),
    yaml: (source, fmt) => call("bl_studio_yaml", source, fmt),
  };
  window.blStudio = api;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    for (const c of children) node.append(c);
    return node;
  }
  // Where (line, column) is in the text, as an offset; never past the
  // end of that line.
  function offsetOf(value, line, column) {
    let at = 0;
    for (let i = 1; i < line; i++) {
      const next = value.indexOf("\n", at);
      if (next < 0) return value.length;
      at = next + 1;
    }
    const end = value.indexOf("\n", at);
    return Math.min(at + Math.max(0, (column || 1) - 1), end < 0 ? value.length : end);
  }
  function goTo(line, column) {
    const at = offsetOf(text.value, line, column);
    text.focus();
    text.setSelectionRange(at, at);
  }
  // Each error, drawn under the text at its line and column: the word it
  // points at (or one cell, at the end of a line) gets a highlight placed
  // by the monospace grid, behind the transparent text area. Only marks a
  // screen or so from the view are drawn: a keystroke costs what is on
  // screen, not the length of the manifest.
  const LINE = 18, PAD = 6;
  let cell = 0;
  let shownMarks = [];
  const view = { top: 0, left: 0, height: 0 };
  function measureView() {
    view.top = text.scrollTop;
    view.left = text.scrollLeft;
    view.height = text.clientHeight;
    if (!cell) {
      const probe = el("span", {}, "x".repeat(100));
      backdrop.append(probe);
      cell = probe.getBoundingClientRect().width / 100 || 7.8;
      probe.remove();
    }
  }
  function drawInline(marks) {
    // Errors only: a warning is marked in the gutter, and a manifest may
    // have hundreds of them, which would cost every keystroke.
    if (marks) shownMarks = [...marks.values()].filter((m) => m.line && m.kind === "bad");
    // The view as the last scroll left it: reading the text area's layout
    // here, after a keystroke, would force it to be laid out at once.
    const value = text.value, top = Math.floor(view.top / LINE);
    const first = top - 300, last = top + Math.ceil(view.height / LINE) + 300;
    // Where each line starts, found once: a mark then costs its own word.
    const starts = [0];
    for (let at = value.indexOf("\n"); at >= 0 && starts.length <= last; at = value.indexOf("\n", at + 1)) starts.push(at + 1);
    const drawn = [];
    for (const m of shownMarks) {
      if (m.line < first || m.line > last || m.line > starts.length) continue;
      const lineStart = starts[m.line - 1];
      const lineEnd = m.line < starts.length ? starts[m.line] - 1 : value.length;
      const at = Math.min(lineStart + Math.max(0, (m.column || 1) - 1), lineEnd);
      let stop = at;
      while (stop < lineEnd && !/[\s,:\[\]{}"']/.test(value[stop])) stop++;
      if (stop === at && stop < lineEnd) stop++;
      const mark = el("mark", { class: m.kind, title: m.message, "data-line": m.line, "data-column": m.column || 1 },
        value.slice(at, stop) || " ");
      mark.style.top = `${PAD + (m.line - 1) * LINE - view.top}px`;
      mark.style.left = `${PAD + (at - lineStart) * cell - view.left}px`;
      mark.style.width = `${Math.max(1, stop - at) * cell}px`;
      drawn.push(mark);
    }
    if (drawn.length || backdrop.firstChild) backdrop.replaceChildren(...drawn);
  }
  // One number per line, made again only when the count of lines
  // changes; a keystroke otherwise only moves the marks.
  let lines = 0;
  const marked = [];
  function drawGutter(marks) {
    // Counted, not split: a split makes a string per line, every keystroke.
    const value = text.value;
    let count = 1;
    for (let at = value.indexOf("\n"); at >= 0; at = value.indexOf("\n", at + 1)) count++;
    if (count !== lines) {
      const numbers = document.createDocumentFragment();
      for (let i = 1; i <= count; i++) numbers.append(el("div", {}, String(i)));
      gutter.replaceChildren(numbers);
      lines = count;
      marked.length = 0;
    }
    for (const line of marked.splice(0)) {
      line.removeAttribute("class");
      line.removeAttribute("title");
    }
    for (const [at, mark] of marks) {
      const line = gutter.children[at - 1];
      if (!line) continue;
      line.className = mark.kind;
      line.title = mark.message;
      marked.push(line);
    }
  }
  function dryRun(plan) {
    const box = $("dryrun");
    box.replaceChildren();
    const after = (names) => names.length ? " after approval by " + names.join(", ") : " with no approval before it";
    const approvals = el("ul", { id: "approvals" });
    for (const a of plan.approvals) {
      approvals.append(el("li", { "data-node": a.node }, `${a.node} waits for a person with role ${a.required_role}`));
    }
    const effects = el("ul", { id: "effects" });
    for (const e of plan.effects) {
      const what = e.kind === "publish" ? `publishes under policy ${e.publication_policy}` : `acts on the world (${e.effects.join(", ")})`;
      effects.append(el("li", { "data-node": e.node }, `${e.node} ${what}${after(e.after_approvals)}`));
    }
    box.append(el("h3", {}, "Approvals it would wait on"), plan.approvals.length ? approvals : el("p", {}, "none"),
      el("h3", {}, "Effects it would have"), plan.effects.length ? effects : el("p", {}, "none: every node is read-only or writes only its workspace"));
  }
  // The number of the drawing on the page: the linter sends a drawing
  // only when it is not this one.
  let drawn = 0;
  function lint() {
    const started = performance.now();
    const report = JSON.parse(call("bl_studio_lint_shown", text.value, format.value, drawn));
    $("took").textContent = `linted in ${(performance.now() - started).toFixed(1)} ms`;
    const result = report.lint, marks = new Map();
    verdict.dataset.valid = String(result.valid);
    verdict.dataset.code = result.code || "";
    verdict.dataset.line = result.line || "";
    verdict.dataset.column = result.column || "";
    const warnings = $("warnings");
    warnings.replaceChildren();
    if (result.valid) {
      verdict.className = "ok";
      verdict.textContent = `Valid: ${result.node_ids.length} nodes, ${result.edge_count} edges · ${result.digest}`;
      // The same drawing is not sent, nor drawn, again.
      if (report.svg !== null) { $("graph").innerHTML = report.svg; drawn = report.drawing; }
      $("graph").classList.remove("stale");
      dryRun(report.dry_run);
      for (const w of report.warnings) {
        if (w.line) marks.set(w.line, { kind: "warn", message: w.message, line: w.line, column: w.column });
        const item = el("li", { "data-rule": w.rule }, `line ${w.line || "?"}: [${w.rule}] ${w.message}`);
        item.addEventListener("click", () => w.line && goTo(w.line, w.column));
        warnings.append(item);
      }
    } else {
      verdict.className = "bad";
      const place = result.line ? ` at line ${result.line}, column ${result.column}` : "";
      verdict.textContent = `[${result.code}] ${result.pointer} — ${result.message}${place}`;
      if (result.line) marks.set(result.line, { kind: "bad", message: result.message, line: result.line, column: result.column });
      // The last valid drawing stays, faded, so the page does not jump.
      $("graph").classList.add("stale");
    }
    drawGutter(marks);
    drawInline(marks);
  }
  verdict.addEventListener("click", () => verdict.dataset.line && goTo(+verdict.dataset.line, +verdict.dataset.column));
  text.addEventListener("input", lint);
  let placing = false;
  text.addEventListener("scroll", () => {
    gutter.scrollTop = text.scrollTop;
    if (placing) return;
    placing = true;
    requestAnimationFrame(() => { placing = false; measureView(); drawInline(); });
  });
  window.addEventListener("resize", () => { measureView(); drawInline(); });
  format.addEventListener("change", lint);
  $("export").addEventListener("click", () => {
    const yaml = api.yaml(text.value, format.value);
    if (!yaml) { verdict.className = "bad"; verdict.textContent = "Nothing to export: the text does not parse."; return; }
    const link = el("a", { href: URL.createObjectURL(new Blob([yaml], { type: "application/yaml" })), download: data.file.replace(/\.(json|ya?ml)$/i, "") + ".yaml" });
    document.body.append(link);
    link.click();
    link.remove();
  });
  text.value = data.manifest;
  format.value = data.format;
  measureView();
  lint();
  document.body.dataset.ready = "true";
})();
