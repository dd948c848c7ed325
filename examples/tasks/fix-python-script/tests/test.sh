#!/bin/bash
# Verifier for fix-python-script: runs /app/stats.py on freshly generated inputs and compares with a reference
# computed here. Reward 1 when every case matches, else 0.
export PATH=/usr/bin:/bin
mkdir -p /logs/verifier
python3 - <<'PY'
import os
import random
import statistics
import subprocess
import tempfile

def expected(numbers):
    lines = [f"count {len(numbers)}", f"sum {sum(numbers):.2f}", f"mean {sum(numbers) / len(numbers):.2f}",
             f"median {statistics.median(numbers):.2f}", f"min {min(numbers):.2f}", f"max {max(numbers):.2f}"]
    return "\n".join(lines) + "\n"

rng = random.Random()
cases = [[7], [3, 1], [5, 1, 4, 2], [9, -3, 9.5, 0], [-2.5, -7.25, -1]]
cases += [[round(rng.uniform(-100, 100), rng.choice([0, 1, 2])) for _ in range(rng.randint(1, 12))] for _ in range(2)]
passed = 0
for numbers in cases:
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(str(int(n)) if float(n).is_integer() else str(n) for n in numbers) + "\n\n")
    try:
        run = subprocess.run(["python3", "/app/stats.py", f.name], capture_output=True, text=True, timeout=10)
        output = run.stdout
    except subprocess.TimeoutExpired:
        output = "<timed out>"
    finally:
        os.unlink(f.name)
    ok = output == expected(numbers)
    passed += ok
    print(f"{'PASS' if ok else 'FAIL'} {numbers}: got {output!r}")
reward = 1 if passed == len(cases) else 0
with open("/logs/verifier/reward.txt", "w") as f:
    f.write(f"{reward}\n")
PY
[ -s /logs/verifier/reward.txt ] || echo 0 > /logs/verifier/reward.txt
