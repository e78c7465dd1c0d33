"use strict";
// The arena's one script. It checks the run's records before it shows
// them as verified: the plan's digest, every event line's place in the
// RFC 6962 tree whose root the checkpoint states, and the checkpoint's
// Ed25519 signature by the key the page was given. Then it colours the
// graph, fills the details of a clicked node and pages the log. Text from
// the run only ever reaches the page as text, never as markup.
(async () => {
  const fromB64 = (s) => (Uint8Array.fromBase64 ? Uint8Array.fromBase64(s) : Uint8Array.from(atob(s), (c) => c.charCodeAt(0)));
  // The run's records come gzipped, in base64.
  const packed = fromB64(document.getElementById("bl-run").textContent.trim());
  const unpacked = new Blob([packed]).stream().pipeThrough(new DecompressionStream("gzip"));
  const run = JSON.parse(await new Response(unpacked).text());
  const enc = new TextEncoder();
  const $ = (id) => document.getElementById(id);
  const toHex = (bytes) => Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  const sha256 = async (bytes) => new Uint8Array(await crypto.subtle.digest("SHA-256", bytes));
  const join = (...parts) => {
    const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) { out.set(p, at); at += p.length; }
    return out;
  };
  const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
  const el = (tag, text, cls) => {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  };

  // RFC 6962: a leaf is SHA-256(0x00 || line), a node SHA-256(0x01 || l || r),
  // split at the largest power of two below the size.
  const rootOf = async (leaves, lo, hi) => {
    const n = hi - lo;
    if (n === 0) return sha256(new Uint8Array());
    if (n === 1) return leaves[lo];
    let k = 1;
    while (k * 2 < n) k *= 2;
    return sha256(join(Uint8Array.of(1), await rootOf(leaves, lo, lo + k), await rootOf(leaves, lo + k, hi)));
  };

  // Who signed, and which run's log: said with "Verified", for the reader
  // to hold against their own key and run.
  let signer = "";
  // Checks one run's records: the page's own run, or a child run of one
  // of its subgraph nodes (held to the same verifier key).
  async function check(r) {
    const why = [];
    let signedBy = "";
    if (r.failure) why.push("the server stopped reading the log: " + r.failure);
    const planDigest = "sha256:" + toHex(await sha256(enc.encode(r.plan)));
    if (planDigest !== r.plan_id) why.push("the plan's digest is not the plan id the run records");
    const events = r.events.map((line) => { try { return JSON.parse(line); } catch { return null; } });
    if (events.some((e) => e === null)) why.push("an event line is not JSON");
    if (events.some((e) => e && e.plan_digest !== r.plan_id)) why.push("an event names another plan");
    // A live page checks again as events arrive: lines already hashed
    // are not hashed again.
    r.leaves = r.leaves || [];
    const fresh = await Promise.all(r.events.slice(r.leaves.length).map((line) => sha256(join(Uint8Array.of(0), enc.encode(line)))));
    for (const leaf of fresh) r.leaves.push(leaf);
    const leaves = r.leaves;
    if (!r.checkpoint) {
      why.push("the run has no checkpoint, so nothing states what its log should hash to");
      return { why, events, signer: signedBy };
    }
    const [head] = r.checkpoint.split("\n\n");
    const body = head + "\n";
    const lines = head.split("\n");
    const size = Number(lines[1]);
    if (!Number.isInteger(size) || size < 1 || size > r.events.length) {
      why.push(`the checkpoint covers ${lines[1]} events but the page holds ${r.events.length}`);
    } else {
      const root = await rootOf(leaves, 0, size);
      if (!same(root, fromB64(lines[2]))) {
        why.push("the events do not hash to the checkpoint's root: the log or this page was altered");
      }
      if (size < r.events.length) why.push(`${r.events.length - size} events came after the last checkpoint`);
    }
    if (!lines.includes(`file ${planDigest} plan.json`)) why.push("the checkpoint does not seal this plan");
    if (!run.verifier) {
      why.push("no verifier key was given (bl graph arena --pubkey KEY), so the checkpoint's signature was not checked");
      return { why, events, signer: signedBy };
    }
    try {
      // <name>+<key id>+<base64(0x01 || public key)>; base64 may hold "+".
      const parts = run.verifier.trim().split("+");
      const name = parts[0];
      const key = fromB64(parts.slice(2).join("+"));
      if (key.length !== 33 || key[0] !== 1) throw new Error("the verifier key is not an Ed25519 key");
      const id = (await sha256(join(enc.encode(name + "\n"), key))).slice(0, 4);
      const signatures = r.checkpoint.split("\n\n")[1] || "";
      const line = signatures.split("\n").find((l) => l.startsWith("\u2014 " + name + " "));
      if (!line) throw new Error(`the checkpoint is not signed by ${name}`);
      const signed = fromB64(line.split(" ")[2]);
      if (!same(signed.slice(0, 4), id)) throw new Error(`the signature is by another key than ${name}`);
      const publicKey = await crypto.subtle.importKey("raw", key.slice(1), { name: "Ed25519" }, false, ["verify"]);
      const good = await crypto.subtle.verify({ name: "Ed25519" }, publicKey, signed.slice(4), enc.encode(body));
      if (!good) throw new Error(`the signature by ${name} does not verify: the checkpoint was altered or signed by another key`);
      signedBy = `key ${name} (id ${toHex(id)}), log ${lines[0]}`;
    } catch (e) {
      why.push(e && e.message ? e.message : String(e));
    }
    return { why, events, signer: signedBy };
  }

  const plan = JSON.parse(run.plan);
  const planNodes = new Map((plan.nodes || []).map((n) => [n.node_id, n]));
  // What the last check found, the run as its events tell it, and what the
  // reader is looking at (kept across refreshes of a live page).
  let result = { why: [], events: [] };
  let nodes = new Map();
  let selected = new URLSearchParams(location.hash.slice(1)).get("node");
  let page = 0;
  const PAGE = 100;

  // The same bytes may be several nodes' artifacts: this node's own first.
  const artifactOf = (digest, node) =>
    run.artifacts.find((a) => a.digest === digest && a.producer && a.producer.node_id === node) ||
    run.artifacts.find((a) => a.digest === digest) || {};
  const nodeName = (x) => (x && typeof x === "object" ? x.node_id || JSON.stringify(x) : x ?? "");

  // Edges by the node they lead to, found once: an edge into a node that
  // was skipped (a route not taken) is drawn as excluded.
  let edgesInto = null;
  const excluded = new Set();

  function project() {
    nodes = new Map();
    const repairs = [];
    let runState = "PENDING";
    result.events.forEach((e, i) => {
      if (!e) return;
      const p = e.payload || {};
      if (e.event_type && e.event_type.startsWith("run.") && p.state) runState = p.state;
      if (e.event_type === "run.repair.round") repairs.push(p);
      if (!p.node_id) return;
      const n = nodes.get(p.node_id) || { events: [], state: "PENDING", attempts: 0, artifacts: new Set(), tokens: 0, cost: 0, rounds: [] };
      nodes.set(p.node_id, n);
      n.events.push(i);
      const at = Date.parse(e.timestamp);
      if (!Number.isNaN(at)) { n.first = n.first ?? at; n.last = at; }
      if (e.event_type === "node.repaired") n.rounds.push(`round ${p.round}: reset from ${p.from_state}`);
      if (p.state) n.state = p.state;
      if (p.attempt) n.attempts = Math.max(n.attempts, p.attempt);
      (p.artifact_digests || []).forEach((d) => n.artifacts.add(d));
      if (p.verdict) n.verdict = p.verdict;
      if (p.route) n.route = p.route;
      if (p.reason) n.reason = p.reason;
      if (p.usage) { n.tokens += (p.usage.input_tokens || 0) + (p.usage.output_tokens || 0); n.cost += p.usage.cost_microunits || 0; }
    });
    const counts = {};
    document.querySelectorAll("#graph g.node").forEach((g) => {
      const n = nodes.get(g.dataset.node) || { state: "PENDING", attempts: 0 };
      counts[n.state] = (counts[n.state] || 0) + 1;
      g.setAttribute("class", "node state-" + n.state.toLowerCase());
      const took = n.first !== undefined ? ` · ${Math.round((n.last - n.first) / 1000)} s` : "";
      const spent = n.tokens ? ` · ${n.tokens} tok` : "";
      g.querySelector("text.state").textContent = `${n.state} · ${n.attempts} attempt${n.attempts === 1 ? "" : "s"}${took}${spent}`;
    });
    for (const r of repairs) {
      const n = nodes.get(r.target_node);
      if (n) n.rounds.push(`round ${r.round}: ${r.reason}`);
    }
    if (!edgesInto) {
      edgesInto = new Map();
      document.querySelectorAll("#graph path.edge").forEach((path) => {
        const list = edgesInto.get(path.dataset.to) || [];
        list.push(path);
        edgesInto.set(path.dataset.to, list);
      });
    }
    // Only what changed is touched: 30,000 edges are not restyled per event.
    for (const [id, paths] of edgesInto) {
      const out = (nodes.get(id) || {}).state === "SKIPPED";
      if (out !== excluded.has(id)) {
        out ? excluded.add(id) : excluded.delete(id);
        paths.forEach((path) => path.classList.toggle("excluded", out));
      }
    }
    const byAgents = (run.decisions || []).filter((d) => d.decided_by_source === "agent").length;
    $("summary").textContent = `run ${runState}; ` + Object.entries(counts).map(([s, c]) => `${c} ${s}`).join(", ") + `; ${run.events.length} events` +
      (byAgents ? `; ${byAgents} approval decision${byAgents > 1 ? "s" : ""} made by an agent, not a person` : "");
  }

  // Who decided an approval, as status says it: an agent's decision is
  // never shown as a person's.
  function decided(d) {
    const who = { agent: `${d.decided_by}, an agent (not a person)`, recorded: `${d.decided_by}, from recorded decisions` }[d.decided_by_source] || d.decided_by;
    return `${d.decision} by ${who}, round ${d.repair_round}, ${d.signed ? "signed" : "unsigned"}, at ${d.decided_at}`;
  }

  function show(id) {
    selected = id;
    const n = nodes.get(id);
    const details = $("details");
    details.replaceChildren(el("h2", id));
    const facts = el("dl");
    const fact = (k, v) => { if (v === undefined || v === null || v === "") return; facts.append(el("dt", k), el("dd", v)); };
    const p = planNodes.get(id) || {};
    fact("kind", p.kind);
    fact("isolation", p.isolation);
    fact("effects", (p.required_effects || []).join(", "));
    fact("state", n ? n.state : "PENDING");
    fact("attempts", n ? n.attempts : 0);
    if (n) {
      if (n.verdict) fact("verdict", (n.verdict.passed ? "passed: " : "failed: ") + (n.verdict.reason || ""));
      if (n.reason) fact("reason", n.reason);
      if (n.route) fact("route", `${n.route.provider_id} / ${n.route.model_id} (${n.route.region})`);
      fact("spend", `${n.tokens} tokens, ${n.cost} microunits`);
      if (n.first !== undefined) fact("duration", `${Math.round((n.last - n.first) / 1000)} s, from its first event to its last`);
      fact("repair rounds", n.rounds.join("; ") || "none");
    }
    (run.decisions || []).filter((d) => d.node_id === id).forEach((d) => fact("decision", decided(d)));
    details.append(facts);
    if (childOf.has(id)) {
      const open = el("button", expanded.has(id) ? "Child run shown below" : "Expand its child run");
      open.type = "button";
      open.id = "expand";
      open.disabled = expanded.has(id);
      open.addEventListener("click", async () => { open.disabled = true; await expand(id); open.textContent = "Child run shown below"; });
      details.append(open);
    }
    if (n && n.artifacts.size) {
      details.append(el("h3", "Artifacts"));
      const table = el("table");
      const header = el("tr");
      header.append(...["digest", "size (bytes)", "role", "visibility", "producer", "consumers"].map((h) => el("th", h)));
      table.append(header);
      n.artifacts.forEach((d) => {
        const a = artifactOf(d, id);
        const producer = a.producer ? `${nodeName(a.producer)}${a.producer.attempt ? " (attempt " + a.producer.attempt + ")" : ""}` : "";
        const row = el("tr");
        row.append(el("td", d, "digest"), el("td", a.size ?? ""), el("td", a.role ?? ""), el("td", a.visibility ?? "-"),
          el("td", producer), el("td", (a.consumers || []).map(nodeName).join(", ") || "-"));
        table.append(row);
      });
      details.append(table);
    }
    if (n) {
      details.append(el("h3", "Events"));
      const list = el("ol", undefined, "node-events");
      n.events.forEach((i) => {
        const e = result.events[i];
        list.append(el("li", `#${e.sequence} ${e.event_type} ${e.timestamp || ""}`));
      });
      details.append(list);
    }
    // The selection is a frame laid over the drawing, not a change to it:
    // any change inside an SVG of 10,000 boxes makes the browser paint all
    // of it again.
    const box = document.querySelector(`#graph g.node[data-node="${CSS.escape(id)}"]`);
    const frame = $("selected");
    frame.dataset.node = id;
    const at = box && /translate\(([-\d.]+),([-\d.]+)\)/.exec(box.getAttribute("transform"));
    frame.hidden = !at;
    if (at) {
      frame.style.left = at[1] + "px";
      frame.style.top = at[2] + "px";
    }
  }

  // Subgraph nodes' child runs, expanded in place on request. Each is
  // checked as the run is (its chain, its checkpoint, the same key), and
  // must end at the head its parent's log recorded for it.
  const childOf = new Map((run.children || []).map((c) => [c.node, c]));
  const expanded = new Set((new URLSearchParams(location.hash.slice(1)).get("expand") || "").split(",").filter(Boolean));

  async function renderChild(child, parentEvents, box) {
    const section = el("section", undefined, "child");
    section.dataset.child = child.node;
    const collapse = el("button", "Collapse");
    collapse.type = "button";
    collapse.addEventListener("click", () => { expanded.delete(child.node); section.remove(); markChildren(); });
    section.append(el("h2", `${child.node}: its child run (${child.path}) `), collapse);
    const trust = el("p", "Checking the child run…", "trust checking");
    section.append(trust);
    box.append(section);
    if (child.unreadable) {
      trust.className = "trust unverified";
      trust.textContent = "LOCAL/UNVERIFIED: the child run could not be read: " + child.unreadable;
      section.dataset.verified = "false";
      return;
    }
    let checked;
    try {
      checked = await check({ ...child, failure: null });
    } catch (e) {
      checked = { why: ["this browser could not check the records: " + e], events: [] };
    }
    const recorded = parentEvents
      .filter((e) => e && e.payload && e.payload.node_id === child.node && e.payload.child_run)
      .map((e) => e.payload.child_run)
      .pop();
    const last = checked.events[checked.events.length - 1];
    if (!recorded) checked.why.push("the parent's log records no head for this child run");
    else if (!last || last.event_hash !== recorded.head_hash || last.sequence !== recorded.head_sequence) {
      checked.why.push("the child's log does not end at the head its parent recorded");
    }
    trust.className = "trust " + (checked.why.length ? "unverified" : "verified");
    trust.textContent = checked.why.length
      ? "LOCAL/UNVERIFIED: " + checked.why.join("; ") + "."
      : `Verified: ${child.events.length} events hash to the child's signed checkpoint (${checked.signer}), and end at the head its parent recorded.`;
    section.dataset.verified = String(!checked.why.length);
    const drawing = el("div", undefined, "child-graph");
    // The drawing was made by bl from the child's plan, every name escaped.
    drawing.innerHTML = child.svg;
    section.append(drawing);
    const states = new Map();
    checked.events.forEach((e) => { const p = (e && e.payload) || {}; if (p.node_id && p.state) states.set(p.node_id, p.state); });
    drawing.querySelectorAll("g.node").forEach((g) => {
      const state = states.get(g.dataset.node) || "PENDING";
      g.setAttribute("class", "node state-" + state.toLowerCase());
      g.querySelector("text.state").textContent = state;
    });
    (child.children || []).forEach((grandchild) => {
      const open = el("button", `Expand ${grandchild.node}'s child run`);
      open.type = "button";
      open.addEventListener("click", () => { open.remove(); renderChild(grandchild, checked.events, section); });
      section.append(open);
    });
  }

  // A subgraph node with a child run says so on its box.
  function markChildren() {
    document.querySelectorAll("#graph g.node").forEach((g) => {
      if (!childOf.has(g.dataset.node)) return;
      g.classList.add("has-child");
      const state = g.querySelector("text.state");
      state.textContent += expanded.has(g.dataset.node) ? " · ⊖ child run" : " · ⊕ child run";
    });
  }

  async function expand(id) {
    if (expanded.has(id) && document.querySelector(`#children section[data-child="${CSS.escape(id)}"]`)) return;
    expanded.add(id);
    await renderChild(childOf.get(id), result.events, $("children"));
    project();
    markChildren();
  }

  // When each attempt ran, on the log's own axis: its events in order.
  // The log's clock ticks in whole seconds, so order (exact) places the
  // bars, and the seconds label the axis. Overlapping bars ran at once.
  function spans() {
    const out = [], waits = [], ready = new Map(), open = new Map();
    let running = 0, most = 0;
    result.events.forEach((e) => {
      const p = (e && e.payload) || {};
      if (!p.node_id) return;
      const id = p.node_id, at = { seq: e.sequence, ts: e.timestamp };
      switch (e.event_type) {
        case "node.ready": ready.set(id, at); break;
        case "node.starting": case "node.running":
          if (!open.has(id)) {
            const span = { node: id, attempt: p.attempt || 1, start: at, end: null, outcome: "running" };
            open.set(id, span); out.push(span); ready.delete(id);
            most = Math.max(most, ++running);
          }
          break;
        case "node.awaiting_approval": waits.push({ node: id, start: at, end: null }); break;
        case "node.succeeded": case "node.failed": case "node.attempt.failed": {
          const span = open.get(id);
          if (span) {
            span.end = at; span.outcome = e.event_type === "node.succeeded" ? "succeeded" : "failed";
            open.delete(id); running--;
          } else {
            const wait = waits.find((w) => w.node === id && !w.end);
            if (wait) wait.end = at;
          }
        }
      }
    });
    return { spans: out, waits, most };
  }

  const ROWS = 300;
  function timeline() {
    const box = $("gantt");
    box.replaceChildren();
    const { spans: bars, waits, most } = spans();
    const last = result.events.length ? result.events[result.events.length - 1] : null;
    const end = last ? last.sequence : 1;
    const order = [...new Set([...bars, ...waits].map((b) => b.node))];
    const shown = order.slice(0, ROWS);
    const row = new Map(shown.map((id, i) => [id, i]));
    const ns = "http://www.w3.org/2000/svg", width = 900, left = 170, height = 16 + shown.length * 18 + 24;
    const x = (seq) => left + ((seq - 1) / Math.max(1, end - 1)) * (width - left - 10);
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("width", width); svg.setAttribute("height", height);
    svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
    const add = (tag, attrs, text) => {
      const node = document.createElementNS(ns, tag);
      for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
      if (text !== undefined) node.textContent = text;
      svg.append(node);
      return node;
    };
    shown.forEach((id, i) => add("text", { x: 4, y: 28 + i * 18, class: "lane" }, id.length > 24 ? id.slice(0, 23) + "…" : id));
    const bar = (b, cls) => {
      const i = row.get(b.node);
      if (i === undefined) return;
      const to = b.end ? b.end.seq : end;
      const rect = add("rect", { x: x(b.start.seq), y: 17 + i * 18, width: Math.max(3, x(to) - x(b.start.seq)), height: 14, class: cls, "data-node": b.node });
      const title = document.createElementNS(ns, "title");
      title.textContent = `${b.node}${b.attempt ? " attempt " + b.attempt : " waiting for a decision"}: events #${b.start.seq}–#${b.end ? b.end.seq : "…"}, ${b.start.ts || ""} to ${b.end ? b.end.ts || "" : "now"}`;
      rect.append(title);
    };
    waits.forEach((w) => bar(w, "wait"));
    bars.forEach((b) => bar(b, "bar " + b.outcome));
    const first = result.events.find((e) => e);
    add("text", { x: left, y: height - 6, class: "axis" }, first ? `#1 ${first.timestamp || ""}` : "");
    add("text", { x: width - 10, y: height - 6, class: "axis", "text-anchor": "end" }, last ? `#${end} ${last.timestamp || ""}` : "");
    box.append(svg);
    $("gantt-summary").textContent = `${bars.length} attempts; at most ${most} ran at once.` +
      (order.length > ROWS ? ` The first ${ROWS} of ${order.length} nodes are drawn.` : "") +
      " Bars are placed by the order of the log's events (exact); its clock ticks in whole seconds.";
    document.body.dataset.mostAtOnce = String(most);
  }

  // The log, a page at a time: a long run never renders whole.
  function paint() {
    const pages = Math.max(1, Math.ceil(result.events.length / PAGE));
    page = Math.min(page, pages - 1);
    const list = $("events");
    list.replaceChildren();
    list.start = page * PAGE + 1;
    result.events.slice(page * PAGE, (page + 1) * PAGE).forEach((e) => {
      list.append(el("li", e ? `${e.event_type}${e.payload && e.payload.node_id ? " " + e.payload.node_id : ""} ${e.timestamp || ""}` : "(not JSON)"));
    });
    $("page").textContent = `page ${page + 1} of ${pages}`;
    $("prev").disabled = page === 0;
    $("next").disabled = page + 1 >= pages;
  }

  // The audit plan's coverage table and release verdict, computed where
  // the page was made from audit nodes' artifacts (each checked against
  // its digest). Here the plan's digest is held against the
  // audit.plan.created event of the log this page verified.
  function audit() {
    const a = run.audit;
    if (!a) return;
    const box = $("audit");
    box.hidden = false;
    box.replaceChildren(el("h2", "Cross-Model Audit"), el("p", "Independent coverage of each cell, reconciled against the audit plan. A mandatory cell that no one audited, that only its producer audited, or that holds an open S0 or S1 finding blocks release. Independence is what each auditor's result asserts (its assessor is not its producer)."));
    const logged = (result.events || []).find((e) => e && e.event_type === "audit.plan.created");
    const recorded = logged && logged.payload ? logged.payload.plan_digest : null;
    const bound = !!(a.plan_digest && recorded === a.plan_digest && !result.why.length);
    let binding;
    if (!a.plan_digest) binding = "The audit plan could not be used, so release is blocked.";
    else if (result.why.length) binding = `The audit plan ${a.plan_digest} is shown, but the log did not verify, so neither does the plan it records.`;
    else if (!recorded) binding = `The audit plan ${a.plan_digest} is not recorded in the run's log (bounded-loops makes such runs): shown, not verified.`;
    else if (bound) binding = `The audit plan ${a.plan_digest} is the one the verified log recorded.`;
    else binding = `The audit plan ${a.plan_digest} is NOT the one the verified log recorded (${recorded}).`;
    box.dataset.bound = String(bound);
    box.append(el("p", binding, "audit-binding " + (bound ? "verified" : "unverified")));
    if (a.cells.length) {
      const table = el("table");
      table.id = "audit-cells";
      const head = el("tr");
      head.append(...["Cell", "Required", "Covered by", "Severity", "Status"].map((h) => el("th", h)));
      table.append(head);
      for (const c of a.cells) {
        const status = (c.missing ? "missing" : c.producer_only ? "self-only" : c.blocking ? "blocks" : "clear") + (c.dissent ? " · dissent" : "");
        const row = el("tr");
        row.dataset.cell = c.cell;
        row.dataset.status = status;
        row.append(el("td", c.cell), el("td", c.mandatory ? "yes" : "—"), el("td", c.covered_by.length ? c.covered_by.join(", ") : "—"),
          el("td", c.verdict_severity + (c.blocking_finding_ids.length ? ` (open: ${c.blocking_finding_ids.join(", ")})` : "")), el("td", status));
        table.append(row);
      }
      box.append(table);
    }
    const said = (a.released ? "RELEASED" : "BLOCKED") + ": " + a.reason + (a.blocking_cells.length ? `. Blocking: ${a.blocking_cells.join(", ")}` : "");
    const verdict = el("p", (a.plan_digest && !bound ? "UNVERIFIED — " : "") + said, "verdict " + (a.released && bound ? "verified" : "unverified"));
    verdict.id = "audit-verdict";
    verdict.dataset.released = String(a.released);
    box.append(verdict);
    for (const note of a.notes) box.append(el("p", note, "audit-note"));
  }

  async function refresh() {
    try {
      result = await check(run);
      signer = result.signer;
    } catch (e) {
      result = { why: ["this browser could not check the records: " + e], events: [] };
    }
    const trust = $("trust");
    trust.className = result.why.length ? "unverified" : "verified";
    trust.textContent = result.why.length
      ? "LOCAL/UNVERIFIED: " + result.why.join("; ") + "."
      : `Verified: ${run.events.length} events hash to the signed checkpoint's root, and the plan is the one it seals (${signer}).`;
    project();
    markChildren();
    if (selected) show(selected);
    timeline();
    audit();
    paint();
  }

  const pick = (target) => { const g = target.closest && target.closest("g.node"); if (g) show(g.dataset.node); };
  $("graph").addEventListener("click", (e) => pick(e.target));
  $("graph").addEventListener("keydown", (e) => { if (e.key === "Enter") pick(e.target); });
  $("prev").addEventListener("click", () => { page = Math.max(0, page - 1); paint(); });
  $("next").addEventListener("click", () => { page += 1; paint(); });
  await refresh();
  // Child runs named in the address (#expand=a,b) open at once.
  for (const id of [...expanded]) {
    expanded.delete(id);
    if (childOf.has(id)) await expand(id);
  }
  document.body.dataset.ready = "true";
  document.body.dataset.readyMs = performance.now().toFixed(0);
  document.body.dataset.held = String(run.events.length);

  // Live (bl graph watch): each event the server sends once, by sequence;
  // a reconnect sends Last-Event-ID, so nothing is lost or repeated.
  if (run.live) {
    let pending = null;
    const later = () => {
      if (pending) return;
      pending = setTimeout(async () => {
        pending = null;
        await refresh();
        document.body.dataset.events = String(run.events.length);
        // When each count of events was on screen (the pages benchmark).
        (window.blShownAt = window.blShownAt || []).push([run.events.length, Date.now()]);
      }, 100);
    };
    const source = new EventSource(run.live);
    source.onmessage = (m) => {
      const sequence = Number(m.lastEventId);
      if (sequence === run.events.length + 1) { run.events.push(m.data); later(); return; }
      // Never expected: the server sends each event once, in order. Counted
      // so that a test sees it, and never drawn.
      const said = document.body.dataset;
      if (sequence <= run.events.length) said.repeated = String(Number(said.repeated || 0) + 1);
      else said.gaps = String(Number(said.gaps || 0) + 1);
    };
    source.addEventListener("checkpoint", (m) => { run.checkpoint = m.data; later(); });
    // The log broke or shrank: nothing the page shows is verified any more.
    source.addEventListener("failure", (m) => { run.failure = m.data; source.close(); later(); });
  }
})();
