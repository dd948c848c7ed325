#!/bin/bash
# Verifier for log-pipeline: recomputes the answer from the verifier's own copy of the log. Reward 1 or 0.
export PATH=/usr/bin:/bin LC_ALL=C
mkdir -p /logs/verifier
expected=$(python3 -I - <<'PY'
from collections import Counter

counts = Counter()
with open("/tests/access.log") as f:
    for line in f:
        fields = line.split()
        if len(fields) > 8 and fields[8].isdigit() and 500 <= int(fields[8]) <= 599:
            counts[fields[0]] += 1
for ip, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:3]:
    print(ip, n)
PY
)
actual=$(cat /app/errors_by_ip.txt 2>/dev/null)
echo "expected:"; echo "$expected"; echo "actual:"; echo "$actual"
if [ -n "$expected" ] && [ "$expected" = "$actual" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
