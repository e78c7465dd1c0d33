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
  function call(fn, source, fmt) {
    const input = enc.encode(source);
    const at = linter.bl_alloc(input.length);
    new Uint8Array(linter.memory.buffer, at, input.length).set(input);
    const len = linter[fn](at, input.length, fmt === "json" ? 1 : 0);
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
  // Each mark, drawn under the text itself at its line and column: the
  // word it points at (or one cell, at the end of a line) is highlighted
  // in a copy of the text behind the transparent text area. Only the
  // text up to the last mark is copied.
  function drawInline(marks) {
    const value = text.value, parts = [];
    let from = 0;
    const spots = [...marks.values()]
      .filter((m) => m.line)
      .map((m) => ({ ...m, at: offsetOf(value, m.line, m.column) }))
      .sort((a, b) => a.at - b.at);
    for (const m of spots) {
      if (m.at < from) continue;
      let stop = m.at;
      while (stop < value.length && !/[\s,:\[\]{}"']/.test(value[stop])) stop++;
      if (stop === m.at && stop < value.length && value[stop] !== "\n") stop++;
      parts.push(value.slice(from, m.at));
      parts.push(el("mark", { class: m.kind, title: m.message, "data-line": m.line, "data-column": m.column || 1 },
        value.slice(m.at, stop) || " "));
      from = stop;
    }
    backdrop.replaceChildren(...parts);
    backdrop.scrollTop = text.scrollTop;
    backdrop.scrollLeft = text.scrollLeft;
  }
  // One number per line, made again only when the count of lines
  // changes; a keystroke otherwise only moves the marks.
  let lines = 0;
  const marked = [];
  function drawGutter(marks) {
    const count = text.value.split("\n").length;
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
  let drawn = "";
  function lint() {
    const started = performance.now();
    const report = api.lint(text.value, format.value);
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
      // The same drawing is not drawn again.
      if (report.svg !== drawn) { $("graph").innerHTML = report.svg; drawn = report.svg; }
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
  text.addEventListener("scroll", () => {
    gutter.scrollTop = backdrop.scrollTop = text.scrollTop;
    backdrop.scrollLeft = text.scrollLeft;
  });
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
  lint();
  document.body.dataset.ready = "true";
})();
