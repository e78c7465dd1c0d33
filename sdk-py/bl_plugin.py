"""Typed helpers for bl plugins written in Python.

A plugin defines ``WitWorld`` in its entry module (``app.py``) with the
function its world exports (a gate's ``check(root, config)``). These helpers
build the verdicts and errors bl expects, read the JSON config, and read
files from the workspace handle, so a plugin rarely touches the generated
bindings directly. ``bl plugin build`` puts this module on the path.
"""

import json
from typing import Iterable, Optional

from componentize_py_types import Err
from wit_world.imports import types

try:  # Only the worlds that judge a workspace import it.
    from wit_world.imports import workspace
except ImportError:
    workspace = None

SEVERITIES = {
    "info": types.Severity.INFO,
    "low": types.Severity.LOW,
    "medium": types.Severity.MEDIUM,
    "high": types.Severity.HIGH,
    "critical": types.Severity.CRITICAL,
}


def bad_config(message: str) -> Err:
    """An error for a config that does not fit: raise it. A plugin that
    cannot decide errs; it never fails the work instead."""
    return Err(types.PluginError_BadConfig(message))


def internal(message: str) -> Err:
    """An error for anything else that keeps the plugin from deciding."""
    return Err(types.PluginError_Internal(message))


def capability(message: str) -> Err:
    """An error for a capability that refused what the plugin asked."""
    return Err(types.PluginError_Capability(message))


def allow(reason: str) -> types.PublishDecision:
    """A publication policy's decision to let the effect go out."""
    return types.PublishDecision(True, reason)


def deny(reason: str) -> types.PublishDecision:
    """A publication policy's decision to hold the effect back."""
    return types.PublishDecision(False, reason)


def report(summary: str) -> types.TransformReport:
    """What a transform returns once it has written its outputs."""
    return types.TransformReport(summary)


# A config field that is a count: a whole number from 0 to 2**32 - 1, as a
# Rust plugin's `usize` field reads it (usize is 32 bits in wasm32).
COUNT = "count"


def _no_duplicates(pairs):
    # serde refuses a field given twice; so does every bl SDK.
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate field `{key}`")
        out[key] = value
    return out


def _no_constant(name):
    # NaN and Infinity are not JSON, though Python's json reads them.
    raise ValueError(f"{name} is not a JSON value")


def config(text: str, required: dict, defaults: Optional[dict] = None) -> dict:
    """The config as a dict, checked: ``required`` maps each key to its type
    (``str``, ``int``, ``bool``, ``list``, ``dict`` or ``COUNT``), as
    ``{"file": str, "min_words": COUNT}``; any other key is refused, as a
    Rust plugin's ``deny_unknown_fields`` does. Each key must be there,
    unless ``defaults`` gives its value (as serde's ``#[serde(default)]``),
    as ``{"min_words": 50}``."""
    defaults = defaults or {}
    try:
        value = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
        # A lone surrogate (`\ud800`) is no Unicode text: serde refuses it.
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except (ValueError, UnicodeEncodeError) as e:
        raise bad_config(f"the config is not JSON: {e}")
    if not isinstance(value, dict):
        raise bad_config("the config must be a JSON object")
    for key in value:
        if key not in required:
            raise bad_config(f"unknown field `{key}`, expected one of {', '.join(required)}")
    for key, kind in required.items():
        if key not in value and key in defaults:
            value[key] = defaults[key]
            continue
        if key not in value:
            raise bad_config(f"missing field `{key}`")
        found = value[key]
        if kind == COUNT:
            if isinstance(found, bool) or not isinstance(found, int) or not 0 <= found < 2**32:
                raise bad_config(f"`{key}` must be a whole number from 0 to 4294967295")
            continue
        if kind is int and (isinstance(found, bool) or not isinstance(found, int)):
            raise bad_config(f"`{key}` must be an integer")
        if not isinstance(found, kind):
            raise bad_config(f"`{key}` must be a {kind.__name__}")
    return value


def finding(message: str, severity: str = "medium", rule: Optional[str] = None,
            path: Optional[str] = None, line: Optional[int] = None) -> types.Finding:
    """One finding; ``path`` (relative to the workspace) and ``line`` place it."""
    location = types.Location(path, line, None) if path is not None else None
    return types.Finding(SEVERITIES[severity], message, rule, location)


def passed(summary: str, findings: Iterable[types.Finding] = ()) -> types.Verdict:
    return types.Verdict(True, summary, list(findings), None)


def failed(summary: str, findings: Iterable[types.Finding] = ()) -> types.Verdict:
    return types.Verdict(False, summary, list(findings), None)


def read_text(root, path: str) -> Optional[str]:
    """The file's text, or None when it does not exist. Any other refusal
    (a path outside the workspace, a directory, a file too large, bytes
    that are not UTF-8) raises a capability error: the plugin cannot
    decide. As the Rust SDK's ``read_to_string`` with ``?`` does."""
    try:
        data = root.read(path)
    except Err as e:
        if isinstance(e.value, workspace.FsError_NotFound):
            return None
        raise Err(types.PluginError_Capability(f"{path}: {e.value.value}"))
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError:
        raise Err(types.PluginError_Capability(f"{path}: not UTF-8 text"))


# Unicode's White_Space characters: what Rust's split_whitespace splits on.
# Python's str.split() also splits on U+001C..U+001F, so a gate counting
# words with it would disagree with the same gate in Rust.
_WHITE_SPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def split_words(text: str) -> list:
    """The words of ``text``, split on Unicode White_Space as Rust's
    ``str::split_whitespace`` splits them."""
    words, word = [], []
    for ch in text:
        if ch in _WHITE_SPACE:
            if word:
                words.append("".join(word))
                word = []
        else:
            word.append(ch)
    if word:
        words.append("".join(word))
    return words
