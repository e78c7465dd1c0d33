"use strict";
// bl monitor: the project's runs, read from this page's own server every
// moment; its graph manifests and loop packages, each previewed before it
// can be started.
(() => {
  const data = JSON.parse(document.getElementById("bl-monitor").textContent);
  const $ = (id) => document.getElementById(id);
  const el = (tag, text, attrs) => {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = String(text);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  };
  const post = async (path, body) => {
    const answer = await fetch(path, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    const text = await answer.text();
    if (!answer.ok) throw new Error(text);
    return JSON.parse(text);
  };
  const open = new Set();

  function row(run) {
    const tr = el("tr", undefined, { "data-run": run.name, "data-state": run.state });
    const spend = run.spend ? `${run.spend.tokens} / ${run.caps && run.caps.tokens != null ? run.caps.tokens : "no cap"}` : (run.laps != null ? `${run.laps} lap${run.laps === 1 ? "" : "s"}` : "");
    const nodes = run.nodes ? run.nodes.map((n) => `${n.node} ${n.state}`).join(", ") : [run.loop || run.package, run.reason].filter(Boolean).join(": ");
    const actions = el("td");
    if (run.kind === "loop" && run.state !== "UNFINISHED" && run.state !== "RUNNING") {
      const where = run.package ? `?package=${encodeURIComponent(run.package)}` : "";
      actions.append(el("a", "report", { href: `loop/${encodeURIComponent(run.name)}/report${where}`, class: "report" }));
    }
    if (run.kind === "graph") {
      actions.append(el("a", "watch", { href: `run/${encodeURIComponent(run.name)}/`, class: "watch" }));
      if ((run.awaiting || []).length) {
        actions.append(" ", el("a", `approve ${run.awaiting.join(", ")}`, { href: `run/${encodeURIComponent(run.name)}/console`, class: "approve" }));
      }
    }
    const more = el("button", open.has(run.name) ? "hide receipts" : "receipts", { type: "button" });
    more.addEventListener("click", () => { open.has(run.name) ? open.delete(run.name) : open.add(run.name); refresh(); });
    if (run.nodes) actions.append(" ", more);
    tr.append(el("td", run.name), el("td", run.kind), el("td", run.state + (run.live ? " (running)" : "")), el("td", spend), el("td", run.error || nodes), actions);
    return tr;
  }

  function receipts(run) {
    const tr = el("tr", undefined, { class: "receipts", "data-receipts": run.name });
    const td = el("td", undefined, { colspan: "6" });
    const table = el("table");
    table.append(el("tr"));
    table.rows[0].append(...["node", "state", "attempts", "gate", "artifacts", "tokens / cap"].map((h) => el("th", h)));
    for (const n of run.nodes) {
      const r = n.receipt || {};
      const gate = r.gate_passed == null ? (r.reason || "") : `${r.gate_passed ? "passed" : "failed"}: ${r.gate_reason || ""}`;
      const line = el("tr");
      line.append(el("td", n.node), el("td", n.state), el("td", n.attempts), el("td", gate),
        el("td", (r.artifacts || []).join(" "), { class: "digest" }),
        el("td", `${n.tokens} / ${n.caps && n.caps.tokens != null ? n.caps.tokens : "no cap"}`));
      table.append(line);
    }
    td.append(table);
    tr.append(td);
    return tr;
  }

  async function refresh() {
    try {
      const runs = await (await fetch("runs.json")).json();
      const body = $("runs").tBodies[0];
      body.replaceChildren();
      for (const run of runs) {
        body.append(row(run));
        if (open.has(run.name) && run.nodes) body.append(receipts(run));
      }
      $("status").textContent = `${runs.length} run${runs.length === 1 ? "" : "s"} under .bounded-loops/runs (the project's and its loop packages'); read ${new Date().toLocaleTimeString()}`;
      document.body.dataset.runs = String(runs.length);
    } catch (e) {
      $("status").textContent = "The monitor's server did not answer: " + e;
    }
  }

  function showPreview(p) {
    const box = $("preview");
    box.replaceChildren(el("h3", `Preview: ${p.manifest}`));
    const facts = el("dl");
    const fact = (k, v) => facts.append(el("dt", k), el("dd", v));
    if (p.kind === "loop") {
      const l = p.lint;
      fact("package", l.valid ? `sound: loop ${l.name}, digest ${p.package_digest}` : `refused: ${l.message}`);
      if (l.valid) {
        const b = l.bounds;
        fact("worker", l.runner);
        fact("gate", l.gate);
        fact("bounds", `at most ${b.max_iterations} laps, ${b.max_tokens != null ? b.max_tokens + " tokens" : "no token cap"}, ${b.max_wallclock_s} s, no progress for ${b.no_progress_window} laps`);
        fact("approval", l.needs_approval ? "a pass needs a human's approval; started here, the run stops PAUSED at it" : "none: the gate alone decides");
      }
    } else {
      fact("lint", p.lint.valid ? `valid, ${p.lint.node_ids.length} nodes, digest ${p.lint.digest}` : `[${p.lint.code}] ${p.lint.pointer} — ${p.lint.message}`);
      fact("takes", Object.entries(p.beside).map(([what, file]) => `${what} (${file})`).join(", ") || "nothing beside the manifest");
    }
    fact("runs into", p.runs_into);
    if (p.dry_run) {
      fact("waits on", p.dry_run.approvals.map((a) => `${a.node} (role ${a.required_role})`).join(", ") || "no approval");
      fact("effects", p.dry_run.effects.map((e) => `${e.node}: ${e.kind === "publish" ? "publishes" : e.effects.join(", ")}` + (e.after_approvals.length ? ` after ${e.after_approvals.join(", ")}` : " with no approval before it")).join("; ") || "none beyond workspaces");
    }
    fact("preview digest", p.digest);
    box.append(facts);
    if (!p.lint.valid) return;
    const start = el("button", "Start this run", { type: "button", id: "start" });
    const said = el("p", "", { id: "started", "aria-live": "polite" });
    start.addEventListener("click", async () => {
      start.disabled = true;
      try {
        const started = await post("start", { manifest: p.manifest, digest: p.digest });
        said.textContent = `started ${started.run}`;
        said.dataset.run = started.run;
        refresh();
      } catch (e) {
        said.textContent = "refused: " + e.message;
        start.disabled = false;
      }
    });
    box.append(start, said);
  }

  async function manifests() {
    const list = $("manifests");
    const found = await (await fetch("manifests.json")).json();
    list.replaceChildren();
    if (!found.length) list.append(el("li", "No graph manifest (bounded-loops.dev/graph/v1) or loop package (loop.yaml) in this project."));
    for (const m of found) {
      const preview = el("button", "preview", { type: "button", "data-manifest": m.path });
      preview.addEventListener("click", async () => {
        try { showPreview(await post("preview", { manifest: m.path })); } catch (e) { $("preview").replaceChildren(el("p", "refused: " + e.message)); }
      });
      list.append(el("li", `${m.path} (${m.kind}) `));
      list.lastChild.append(preview);
    }
  }

  (async () => {
    await Promise.all([refresh(), manifests()]);
    document.body.dataset.ready = "true";
    setInterval(refresh, data.refresh_ms);
  })();
})();
