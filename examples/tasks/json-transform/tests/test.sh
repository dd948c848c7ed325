#!/bin/bash
# Verifier for json-transform: recomputes the report from the verifier's own copies of the inputs.
export PATH=/usr/bin:/bin
mkdir -p /logs/verifier
python3 -I - <<'PY'
import json
import math

users = json.load(open("/tests/users.json"))
orders = json.load(open("/tests/orders.json"))
expected = {u["name"]: 0.0 for u in users if u["active"]}
ids = {u["id"]: u["name"] for u in users if u["active"]}
for order in orders:
    if order["user_id"] in ids:
        expected[ids[order["user_id"]]] += order["amount"]
try:
    with open("/app/report.json") as f:
        actual = json.load(f)
except (OSError, ValueError) as exc:
    actual = f"unreadable: {exc}"
ok = (
    isinstance(actual, dict)
    and actual.keys() == expected.keys()
    and all(
        isinstance(v, int | float) and not isinstance(v, bool) and math.isclose(v, round(expected[k], 2), abs_tol=1e-9)
        for k, v in actual.items()
    )
)
print("expected:", {k: round(v, 2) for k, v in expected.items()})
print("actual:  ", actual)
with open("/logs/verifier/reward.txt", "w") as f:
    f.write("1\n" if ok else "0\n")
PY
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
