#!/usr/bin/python3
"""Fake agent CLI used to record bounded-loops 0.7.6 graph runs.

Invoked as claude / codex / grok / muse / agy (symlinks). The prompt arrives on
stdin (claude) or as the last positional argument (the others). Behaviour is
chosen by the prompt text:
  ok | anything else -> reply "reply to: <prompt>" and exit 0
  fail               -> print to stderr, exit 1
  empty              -> print nothing (empty reply), exit 0
  flaky:N            -> exit 1 for the first N calls with this prompt, then reply
  flaky:N:KEY        -> same, counter keyed by KEY
  badjson            -> (claude only) print a non-JSON line, exit 0
  iserror            -> (claude only) envelope with is_error=true
  sleep:S            -> sleep S seconds, then reply
  binary             -> print invalid UTF-8 bytes, exit 0
Every call is appended to ../state/calls.jsonl; counters live in ../state/.
"""
import json, os, sys, time

here = os.path.dirname(os.path.abspath(__file__))
state = os.path.join(os.path.dirname(here), "state")
os.makedirs(state, exist_ok=True)
name = os.path.basename(sys.argv[0])
args = sys.argv[1:]
if name == "claude":
    prompt = sys.stdin.read()
elif name in ("agy", "grok") and "-p" in args:
    prompt = args[args.index("-p") + 1]
else:
    prompt = args[-1] if args else ""
variant_file = os.path.join(state, "envelope")
variant = open(variant_file).read().strip() if os.path.exists(variant_file) else "default"
p = prompt.strip()
with open(os.path.join(state, "calls.jsonl"), "a") as f:
    f.write(json.dumps({"cli": name, "args": args, "prompt": prompt}) + "\n")


def reply(text):
    if name in ("claude", "agy", "grok"):
        env = {"type": "result", "subtype": "success", "is_error": False,
               "result": text, "num_turns": 1, "session_id": "fake",
               "total_cost_usd": 0.0,
               "usage": {"input_tokens": 10, "cache_creation_input_tokens": 0,
                         "cache_read_input_tokens": 0, "output_tokens": 5}}
        if variant != "default":
            env = json.loads(variant.replace("@TEXT@", json.dumps(text)[1:-1]))
        sys.stdout.write(json.dumps(env) + "\n")
    else:
        sys.stdout.write(text)
    sys.exit(0)


if p == "fail":
    sys.stderr.write("fake agent: failing as asked\n")
    sys.exit(1)
if p == "empty":
    reply("")
if p == "badjson" and name == "claude":
    sys.stdout.write("this is not json\n")
    sys.exit(0)
if p == "iserror" and name == "claude":
    sys.stdout.write(json.dumps({"type": "result", "subtype": "error", "is_error": True, "result": "boom",
                                 "usage": {"input_tokens": 1, "output_tokens": 1}}) + "\n")
    sys.exit(0)
if p == "binary":
    if name == "claude":
        reply("\udcff")  # unreachable in JSON; claude cannot carry raw bytes
    sys.stdout.buffer.write(b"\xff\xfe\xfd")
    sys.exit(0)
if p.startswith("sleep:"):
    time.sleep(float(p.split(":")[1]))
    reply("slept " + p)
if p.startswith("flaky:"):
    parts = p.split(":")
    n = int(parts[1])
    key = parts[2] if len(parts) > 2 else "default"
    cf = os.path.join(state, "flaky-" + key)
    c = int(open(cf).read()) if os.path.exists(cf) else 0
    open(cf, "w").write(str(c + 1))
    if c < n:
        sys.stderr.write("fake agent: flaky failure %d/%d\n" % (c + 1, n))
        sys.exit(1)
    reply("reply to: %s (call %d)" % (p, c + 1))
reply("reply to: " + p)
