#!/usr/bin/env python3
"""Record what bounded-loops 0.7.6's `bl run` does with each catalog loop.

Usage:
    python3 record.py <path-to-upstream-bl> <catalog-loops-dir> [out.json]

For every loop package in <catalog-loops-dir> (each a directory with a
loop.yaml), in a fresh temporary directory: copy the package there (without
__pycache__), cd into the temporary directory, and run

    <bl> run <name> --yes --json

with a 600 s timeout and a minimal environment (PATH from the caller, HOME a
fresh empty directory, no BOUNDED_LOOPS_* variables, no CI).  What it prints,
exits with and writes is stored in expected.json next to this script (or
[out.json]).  Only the standard library is needed; if PyYAML can be imported
it is used to read loop.yaml, otherwise a small reader of the few top-level
fields we keep is used.

Nothing of the catalog itself is stored except file names and sha256 digests,
so a test can check it replays the same catalog.
"""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

TIMEOUT_S = 600
UPSTREAM = "bounded-loops 0.7.6"


def file_digests(root, skip=lambda rel: False):
    """{relative path: sha256 hex} of every regular file under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in filenames:
            full = os.path.join(dirpath, fn)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if skip(rel) or not os.path.isfile(full):
                continue
            with open(full, "rb") as fh:
                out[rel] = hashlib.sha256(fh.read()).hexdigest()
    return out


def all_files(root):
    """Relative paths of every file under root, __pycache__ included."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for fn in filenames:
            rel = os.path.relpath(os.path.join(dirpath, fn), root)
            out.append(rel.replace(os.sep, "/"))
    return sorted(out)


def read_manifest_fields(path):
    """(runner.default, gate.kind, rung) from loop.yaml."""
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    try:
        import yaml  # type: ignore

        doc = yaml.safe_load(text) or {}
        runner = doc.get("runner") or {}
        gate = doc.get("gate") or {}
        return (
            runner.get("default") if isinstance(runner, dict) else None,
            gate.get("kind") if isinstance(gate, dict) else None,
            doc.get("rung"),
        )
    except ImportError:
        pass
    # Fallback: top-level `rung:` and the first `default:` / `kind:` inside the
    # `runner:` / `gate:` blocks (block style, as the catalog writes them).
    section = None
    runner = kind = rung = None

    def scalar(v):
        v = v.split(" #", 1)[0].strip()
        if len(v) >= 2 and v[0] == v[-1] and v[0] in "'\"":
            v = v[1:-1]
        return v or None

    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if not line[0].isspace():
            key, _, val = line.partition(":")
            section = key.strip()
            if section == "rung":
                rung = scalar(val)
            continue
        key, _, val = line.strip().partition(":")
        if section == "runner" and key == "default" and runner is None:
            runner = scalar(val)
        elif section == "gate" and key == "kind" and kind is None:
            kind = scalar(val)
    return runner, kind, rung


class Scrub:
    """Replace machine-specific paths with placeholders: the temporary
    directories (<TMP>, <HOME>), the directory holding the upstream `bl`
    (<BL_BIN>: its pytest gate runs `<BL_BIN>/python3 -m pytest`), and the
    scratch workspaces upstream makes under the system temp dir (<WS>)."""

    def __init__(self, pairs):
        subs = []
        for path, label in pairs:
            for p in {path, os.path.realpath(path)}:
                subs.append((p, label))
        # longest first, so /private/tmp/x wins over /tmp/x
        self.subs = sorted(subs, key=lambda s: -len(s[0]))
        tmp = tempfile.gettempdir()
        self.ws = re.compile("(?:%s)/bounded-loops-[A-Za-z0-9_]+" % "|".join(
            re.escape(t) for t in sorted({tmp, os.path.realpath(tmp)}, key=len,
                                         reverse=True)))

    def text(self, s):
        for p, label in self.subs:
            s = s.replace(p, label)
        return self.ws.sub("<WS>", s)

    def value(self, v):
        if isinstance(v, str):
            return self.text(v)
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if isinstance(v, dict):
            return {self.text(k): self.value(x) for k, x in v.items()}
        return v


def key_order(value, prefix=""):
    """Dotted paths of every object key, in document order (the ledger's
    hash covers the raw line, so the order of keys matters)."""
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            path = prefix + k
            out.append(path)
            out.extend(key_order(v, path + "."))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.extend(key_order(v, "%s%d." % (prefix, i)))
    return out


TS_IN_TEXT = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z")


def read_text_file(path, scrub, limit=65536):
    with open(path, "rb") as fh:
        raw = fh.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if len(raw) > limit:
        return None
    return TS_IN_TEXT.sub("<TS>", scrub.text(text))


def normalize_ledger_row(row):
    if isinstance(row, dict):
        if "ts" in row:
            row["ts"] = "<TS>"
        spent = row.get("budget_spent")
        if isinstance(spent, dict) and "wallclock_s" in spent:
            spent["wallclock_s"] = "<S>"
    return row


def record_one(bl, catalog, name):
    src = os.path.join(catalog, name)
    rec = {}
    runner, kind, rung = read_manifest_fields(os.path.join(src, "loop.yaml"))
    rec["manifest"] = {"runner_default": runner, "gate_kind": kind, "rung": rung}
    rec["package_files"] = file_digests(src)

    with tempfile.TemporaryDirectory(prefix="bl-corpus-") as tmp, \
            tempfile.TemporaryDirectory(prefix="bl-corpus-home-") as home:
        pkg = os.path.join(tmp, name)
        shutil.copytree(src, pkg, ignore=shutil.ignore_patterns("__pycache__"))
        before_pkg = file_digests(pkg)
        before_all = set(all_files(tmp))
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": home}
        scrub = Scrub([(tmp, "<TMP>"), (home, "<HOME>"),
                       (os.path.dirname(bl), "<BL_BIN>")])
        argv = [bl, "run", name, "--yes", "--json"]
        try:
            proc = subprocess.run(
                argv, cwd=tmp, env=env, stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                timeout=TIMEOUT_S,
            )
            rec["exit_code"] = proc.returncode
            stdout = proc.stdout.decode("utf-8", "replace")
            stderr = proc.stderr.decode("utf-8", "replace")
        except subprocess.TimeoutExpired as exc:
            rec["exit_code"] = None
            rec["timed_out"] = True
            stdout = (exc.stdout or b"").decode("utf-8", "replace")
            stderr = (exc.stderr or b"").decode("utf-8", "replace")

        # stdout is the trust preview (printed even with --json and --yes)
        # followed by the outcome as one JSON line
        outcome = None
        preamble = stdout
        lines = stdout.splitlines(keepends=True)
        for i in range(len(lines) - 1, -1, -1):
            if lines[i].startswith("{"):
                try:
                    outcome = json.loads("".join(lines[i:]))
                    preamble = "".join(lines[:i])
                except ValueError:
                    pass
                break
        rec["outcome"] = scrub.value(outcome)
        if outcome is None:
            rec["stdout"] = scrub.text(stdout)
        else:
            rec["stdout_before_outcome"] = scrub.text(preamble)

        event = None
        rest = []
        for line in stderr.splitlines(keepends=True):
            if line.startswith("BL_EVENT ") and event is None:
                try:
                    event = json.loads(line[len("BL_EVENT "):])
                    continue
                except ValueError:
                    pass
            rest.append(line)
        rec["event"] = scrub.value(event)
        rec["stderr"] = scrub.text("".join(rest))

        ledger_rel = None
        ledger = None
        if isinstance(outcome, dict) and outcome.get("ledger_path"):
            lp = outcome["ledger_path"]
            if not os.path.isabs(lp):
                lp = os.path.join(tmp, lp)
            ledger_rel = scrub.text(outcome["ledger_path"])
            if os.path.isfile(lp):
                with open(lp, "rb") as fh:
                    raw = fh.read()
                rows = []
                orders = []
                for line in raw.decode("utf-8", "replace").splitlines():
                    if not line.strip():
                        continue
                    try:
                        row = json.loads(line)
                    except ValueError:
                        rows.append({"<unparsed>": line})
                        orders.append(None)
                        continue
                    orders.append(key_order(row))
                    rows.append(normalize_ledger_row(row))
                ledger = {
                    "line_count": raw.count(b"\n"),
                    "ends_with_newline": raw.endswith(b"\n"),
                    "compact_separators": raw.startswith(b'{"prev":"'),
                    "ascii_only": all(b < 0x80 for b in raw),
                    "rows": scrub.value(rows),
                    "key_order": orders,
                }
        rec["ledger"] = ledger

        after_pkg = file_digests(
            pkg, skip=lambda rel: ledger_rel is not None
            and ledger_rel.endswith("/" + name + "/" + rel))
        rec["package_changes"] = {
            "new": sorted(set(after_pkg) - set(before_pkg)),
            "changed": sorted(r for r in after_pkg
                              if r in before_pkg and after_pkg[r] != before_pkg[r]),
            "removed": sorted(set(before_pkg) - set(after_pkg)),
        }
        rec["handoff_written"] = os.path.isfile(os.path.join(pkg, "HANDOFF.md"))
        # text of the new or changed files (HANDOFF.md, .STATE.md.runtime...),
        # paths and ISO timestamps replaced; None when binary or over 64 KiB
        rec["package_changes"]["contents"] = {
            rel: read_text_file(os.path.join(pkg, rel), scrub)
            for rel in rec["package_changes"]["new"] + rec["package_changes"]["changed"]
        }
        # everything new under the temp dir (outside the package too),
        # __pycache__ listed apart as it depends on the python3 on PATH
        new_all = sorted(set(all_files(tmp)) - before_all)
        rec["new_files_in_cwd"] = [p for p in new_all if "__pycache__" not in p]
        rec["new_pycache_in_cwd"] = [p for p in new_all if "__pycache__" in p]
        # only the top-level names: npx fills HOME with thousands of cache files
        rec["new_entries_in_home"] = sorted({p.split("/", 1)[0] for p in all_files(home)})
    return rec


def environment():
    """Which of the tools the catalog's gates and runners use are on PATH
    (several loops' outcomes depend on it)."""
    tools = ["python3", "pytest", "node", "npx", "git", "checkov",
             "osv-scanner", "gitleaks", "semgrep", "trivy", "promptfoo"]
    found = {t: shutil.which(t) is not None for t in tools}
    return {"platform": sys.platform, "tools_on_path": found}


def main(argv):
    if len(argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    bl = os.path.abspath(argv[1])
    catalog = os.path.abspath(argv[2])
    here = os.path.dirname(os.path.abspath(__file__))
    out_path = argv[3] if len(argv) > 3 else os.path.join(here, "expected.json")
    for k in list(os.environ):
        if k.startswith("BOUNDED_LOOPS_") or k == "CI":
            del os.environ[k]
    names = sorted(n for n in os.listdir(catalog)
                   if os.path.isfile(os.path.join(catalog, n, "loop.yaml")))
    loops = {}
    for i, name in enumerate(names, 1):
        rec = record_one(bl, catalog, name)
        loops[name] = rec
        o = rec.get("outcome") or {}
        sys.stderr.write("[%d/%d] %s: rc=%s %s %s laps=%s\n" % (
            i, len(names), name, rec.get("exit_code"), o.get("status"),
            o.get("reason"), o.get("laps")))
    doc = {
        "upstream": UPSTREAM,
        "recorded_with": "python3 tests/corpus/loops/record.py <bl> "
                         "<site-packages>/bounded_loops/catalog/loops "
                         "(PyYAML importable or not); per loop: copy the package "
                         "to <TMP>/<name>, cd <TMP>, `<bl> run <name> --yes --json`, "
                         "stdin /dev/null, env = PATH + a fresh empty HOME only",
        "environment": environment(),
        "loops": loops,
    }
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, sort_keys=True, indent=1, ensure_ascii=False)
        fh.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
