"""Exit 0 when every record has the right checksum; 1 otherwise."""
import hashlib
import json
import sys

records = json.load(open(sys.argv[1]))
bad = [r.get("id") for r in records if r.get("checksum") != hashlib.sha256(str(r.get("id")).encode()).hexdigest()]
if bad:
    print(f"{len(bad)} record(s) without a valid checksum: {', '.join(map(str, bad))}")
    sys.exit(1)
print(f"all {len(records)} records have valid checksums")
