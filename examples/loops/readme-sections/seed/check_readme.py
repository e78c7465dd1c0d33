"""Exit 0 when the README has Install, Usage and License sections with text; 1 otherwise."""
import sys

REQUIRED = ["Install", "Usage", "License"]


def sections(text):
    found, current = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            found[current] = []
        elif current is not None and line.strip():
            found[current].append(line)
    return found


def main(path):
    try:
        text = open(path, encoding="utf-8").read()
    except OSError as e:
        print(f"cannot read {path}: {e}", file=sys.stderr)
        return 2
    found = sections(text)
    problems = [f"missing section: {name}" for name in REQUIRED if name not in found]
    problems += [f"empty section: {name}" for name in REQUIRED if name in found and not found[name]]
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{path}: all {len(REQUIRED)} sections present")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
