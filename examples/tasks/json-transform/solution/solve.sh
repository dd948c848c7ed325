#!/bin/bash
# Reference solution for json-transform.
set -euo pipefail
python3 - <<'PY'
import json

users = json.load(open("/app/input/users.json"))
orders = json.load(open("/app/input/orders.json"))
names = {u["id"]: u["name"] for u in users if u["active"]}
totals = {name: 0.0 for name in names.values()}
for order in orders:
    if order["user_id"] in names:
        totals[names[order["user_id"]]] += order["amount"]
with open("/app/report.json", "w") as f:
    json.dump({name: round(total, 2) for name, total in totals.items()}, f, indent=2)
PY
