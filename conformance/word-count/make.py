#!/usr/bin/env python3
"""Writes the word-count conformance corpus: one directory a case, each with
the config (config.json) and the workspace the gate judges (workspace/).
The verdicts each case expects (expected.json) are recorded from the Rust
word-count with `bl plugin test … --record`. Run from this directory."""

import json
import os
import shutil

HERE = os.path.dirname(os.path.abspath(__file__))
SEPARATORS = [" ", "\t", "\n", "\r\n", "  \n\t ", "\u00a0", "\u2003", "\u3000", "\u001f", "\u0085"]


def case(name, files, config, link=None):
    root = os.path.join(HERE, name)
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(os.path.join(root, "workspace"))
    for path, data in files:
        full = os.path.join(root, "workspace", path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
    if link:
        os.symlink(link[1], os.path.join(root, "workspace", link[0]))
    with open(os.path.join(root, "config.json"), "w") as f:
        f.write(config if isinstance(config, str) else json.dumps(config))


def main():
    for i, sep in enumerate(SEPARATORS):
        for words in [0, 1, 2, 5, 9]:
            text = sep.join(f"w{w}" for w in range(words))
            for minimum in [1, 5]:
                body = f"{sep}{text}{sep}".encode()
                case(f"sep{i}-{words}-words-min{minimum}", [("r.md", body)], {"file": "r.md", "min_words": minimum})
    one = {"file": "r.md", "min_words": 1}
    case("missing", [], one)
    case("not-utf8", [("r.md", b"\xff\xfe a")], one)
    case("nested", [("a/b/r.md", b"one two")], {"file": "a/b/r.md", "min_words": 2})
    case("a-directory", [("d/x", b"x")], {"file": "d", "min_words": 1})
    case("escape", [], {"file": "../r.md", "min_words": 1})
    case("absolute", [], {"file": "/etc/hostname", "min_words": 1})
    case("empty-file", [("r.md", b"")], one)
    case("unicode-words", [("r.md", "héllo wörld 世界".encode())], {"file": "r.md", "min_words": 3})
    case("big", [("r.md", b"word " * 20000)], {"file": "r.md", "min_words": 19999})
    case("zero-min", [("r.md", b"")], {"file": "r.md", "min_words": 0})
    case("bad-config-type", [], {"file": 1, "min_words": 1})
    case("bad-config-missing", [], {"file": "r.md"})
    case("bad-config-extra", [], {"file": "r.md", "min_words": 1, "x": 1})
    case("bad-config-negative", [], {"file": "r.md", "min_words": -1})
    case("bad-config-bool", [], {"file": "r.md", "min_words": True})
    case("bad-config-array", [], [1, 2])
    case("nul-in-name", [], {"file": "r\u0000.md", "min_words": 1})
    case("float-min", [], '{"file": "r.md", "min_words": 1.5}')
    case("whole-float-min", [("r.md", b"a")], '{"file": "r.md", "min_words": 1.0}')
    case("min-past-u64", [], '{"file": "r.md", "min_words": 18446744073709551616}')
    case("min-past-u32", [("r.md", b"a")], '{"file": "r.md", "min_words": 5000000000}')
    case("min-at-u32-max", [("r.md", b"a")], '{"file": "r.md", "min_words": 4294967295}')
    case("empty-path", [], {"file": "", "min_words": 1})
    case("dot-path", [], {"file": ".", "min_words": 1})
    case("symlink-out", [], {"file": "link", "min_words": 1}, link=("link", "/etc/hostname"))
    # Config text that JSON parsers disagree on: each must be refused
    # (bad-config) the same way in every language.
    two = [("r.md", b"one two"), ("o.md", b"one")]
    case("dup-key-file", two, '{"file": "r.md", "file": "o.md", "min_words": 2}')
    case("dup-key-min", two, '{"file": "r.md", "min_words": 5, "min_words": 1}')
    case("bom-config", two, '\ufeff{"file": "r.md", "min_words": 1}')
    case("nan-min", two, '{"file": "r.md", "min_words": NaN}')
    case("infinity-min", two, '{"file": "r.md", "min_words": Infinity}')
    case("trailing-garbage", two, '{"file": "r.md", "min_words": 1} x')
    case("lone-surrogate", two, '{"file": "r\\ud800.md", "min_words": 1}')
    case("min-as-string", two, '{"file": "r.md", "min_words": "1"}')
    case("key-case", two, '{"File": "r.md", "min_words": 1}')
    case("null-file", two, '{"file": null, "min_words": 1}')
    case("empty-config", two, "")
    # Workspace text at the edges of "a word".
    case("bom-in-file", [("r.md", "\ufeffone two".encode())], {"file": "r.md", "min_words": 2})
    case("only-bom", [("r.md", "\ufeff".encode())], {"file": "r.md", "min_words": 1})
    case("zero-width-space", [("r.md", "one\u200btwo".encode())], {"file": "r.md", "min_words": 2})
    case("crlf-only", [("r.md", b"\r\n\r\n")], {"file": "r.md", "min_words": 1})


if __name__ == "__main__":
    main()
