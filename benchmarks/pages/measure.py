#!/usr/bin/env python3
"""Measures bl's pages in headless Chromium, through chromedriver's
WebDriver protocol (plain HTTP on loopback; no client library).

usage:
  measure.py DRIVER_PORT arena PAGE NODE...      first paint, verified, clicks
  measure.py DRIVER_PORT watch URL LOG           appended event -> on screen
  measure.py DRIVER_PORT studio PAGE             lint + redraw per keystroke
Prints one JSON object.
"""
import json, os, sys, time, urllib.request

port, what = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}"


def read_log_from(log, offset):
    """The bytes of a run's log from `offset` on, read as bl reads it: the
    log file, then the lines its writer staged beside it and has not moved
    in yet (`<log>.staged-<where they go in the log>`)."""
    size = os.path.getsize(log) if os.path.exists(log) else 0
    if offset < size:
        with open(log, "rb") as f:
            f.seek(offset)
            return f.read()
    folder, name = os.path.split(log)
    for entry in os.listdir(folder):
        at = entry[len(name) + len(".staged-"):]
        if entry.startswith(name + ".staged-") and at.isdigit() and int(at) <= offset:
            try:
                with open(os.path.join(folder, entry), "rb") as f:
                    f.seek(offset - int(at))
                    return f.read()
            except FileNotFoundError:
                pass  # moved into the log since it was listed
    return b""

def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as answer:
        return json.loads(answer.read() or b"null")["value"]


profile = f"/tmp/bl-pages-bench-profile-{os.getpid()}"
session = call("POST", "/session", {"capabilities": {"alwaysMatch": {"goog:chromeOptions": {
    "binary": "/usr/bin/chromium",
    "args": ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--window-size=1400,900", f"--user-data-dir={profile}"]}}}})["sessionId"]


def run(script, *args):
    return call("POST", f"/session/{session}/execute/sync", {"script": script, "args": list(args)})


def run_async(script, *args):
    return call("POST", f"/session/{session}/execute/async", {"script": script, "args": list(args)})


def wait_for(script, timeout=600):
    until = time.time() + timeout
    while time.time() < until:
        value = run(script)
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for: {script}")


def p95(values):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(0.95 * (len(values) - 1))))] if values else None


call("POST", f"/session/{session}/timeouts", {"script": 600000, "pageLoad": 600000})
out = {}
try:
    if what == "arena":
        page, nodes = sys.argv[3], sys.argv[4:]
        call("POST", f"/session/{session}/url", {"url": "file://" + os.path.abspath(page)})
        paints = run("return performance.getEntriesByType('paint').map(e => [e.name, e.startTime])")
        out["first_paint_ms"] = dict(paints).get("first-paint")
        out["first_contentful_paint_ms"] = dict(paints).get("first-contentful-paint")
        out["largest_contentful_paint_ms"] = run_async("""
            const done = arguments[arguments.length - 1];
            new PerformanceObserver((list) => {
              const all = list.getEntries();
              done(all.length ? all[all.length - 1].startTime : null);
            }).observe({type: "largest-contentful-paint", buffered: true});
            setTimeout(() => done(null), 2000);
        """)
        out["verified_ms"] = float(wait_for("return document.body.dataset.readyMs"))
        out["trust"] = run("return document.getElementById('trust').textContent")[:160]
        clicks = []
        for node in nodes:
            clicks.append(run_async("""
                const done = arguments[arguments.length - 1];
                const g = document.querySelector(`#graph g.node[data-node="${arguments[0]}"]`);
                const t0 = performance.now();
                g.dispatchEvent(new MouseEvent("click", {bubbles: true}));
                requestAnimationFrame(() => setTimeout(() => done(performance.now() - t0), 0));
            """, node))
        out["click_ms"] = clicks
        out["click_max_ms"] = max(clicks)
    elif what == "watch":
        url, log = sys.argv[3], sys.argv[4]
        call("POST", f"/session/{session}/url", {"url": url})
        wait_for("return document.body.dataset.ready")
        # Each line of the log, when it appeared (its new bytes read every
        # 2 ms).
        appended, seen, offset, started = {}, 0, 0, time.time()
        while time.time() - started < 600:
            done = os.path.exists(log + ".done")
            chunk = read_log_from(log, offset)
            offset += len(chunk)
            now = time.time()
            for _ in range(chunk.count(b"\n")):
                seen += 1
                appended[seen] = now
            if done and not chunk:
                break
            time.sleep(0.002)
        time.sleep(1.0)
        shown = run("return window.blShownAt || []")
        first_shown = {}
        for count, at in shown:
            for n in range(1, count + 1):
                first_shown.setdefault(n, at / 1000.0)
        held = int(run("return document.body.dataset.held"))
        # Only the events that came while the page was open.
        delays = [(first_shown[n] - appended[n]) * 1000 for n in appended if n > held and n in first_shown]
        out["events_appended"] = len(appended)
        # Those appended after the page had loaded; each must have been shown.
        out["events_after_open"] = sum(1 for n in appended if n > held)
        out["events_timed"] = len(delays)
        out["delay_p50_ms"] = sorted(delays)[len(delays) // 2] if delays else None
        out["delay_p95_ms"] = p95(delays)
    elif what == "studio":
        page = sys.argv[3]
        call("POST", f"/session/{session}/url", {"url": "file://" + os.path.abspath(page)})
        wait_for("return document.body.dataset.ready")
        out["verdict"] = run("return document.getElementById('verdict').textContent")[:120]
        times = run("""
            const text = document.getElementById("text"), times = [];
            // A keystroke: the text changes, then the page's input
            // handler lints, draws and marks (what is timed).
            for (let i = 0; i < 30; i++) {
              text.value = text.value + (i % 2 ? "" : " ");
              const t0 = performance.now();
              text.dispatchEvent(new Event("input"));
              times.push(performance.now() - t0);
            }
            return times;
        """)
        out["keystroke_ms"] = [round(t, 1) for t in times]
        out["keystroke_p95_ms"] = p95(times[3:])
finally:
    call("DELETE", f"/session/{session}")
print(json.dumps(out))
