"""A stand-in agent: reads the task on stdin, fixes the first record without a checksum."""
import hashlib
import json
import sys

sys.stdin.read()
path = "seed/records.json"
records = json.load(open(path))
for record in records:
    if "checksum" not in record:
        record["checksum"] = hashlib.sha256(record["id"].encode()).hexdigest()
        json.dump(records, open(path, "w"))
        print(f"added a checksum to record {record['id']}")
        break
else:
    print("every record has a checksum")
