#!/bin/bash
python3 - <<'PY'
import os, socket
reached = []
for target in ("pypi.org", os.environ.get("PROBE_ADDRESS", "")):
    if not target:
        continue
    try:
        socket.create_connection((target, 443), 10).close()
        print(f"{target}: connected")
        reached.append(target)
    except OSError as exc:
        print(f"{target}: {type(exc).__name__}: {exc}")
with open("/logs/verifier/reward.txt", "w") as f:
    f.write("1" if reached else "0")
PY
