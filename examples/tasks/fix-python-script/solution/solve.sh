#!/bin/bash
# Reference solution for fix-python-script: parse floats, true division, even-length median, max of all values.
set -euo pipefail
cat > /app/stats.py <<'PY'
"""Print summary statistics of the numbers in a file (one number per line; blank lines are ignored).

Usage: python3 stats.py NUMBERS_FILE
"""

import sys


def read_numbers(path):
    with open(path) as f:
        return [float(line) for line in f if line.strip()]


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2 == 0:
        return (ordered[middle - 1] + ordered[middle]) / 2
    return ordered[middle]


def main():
    numbers = read_numbers(sys.argv[1])
    print(f"count {len(numbers)}")
    print(f"sum {sum(numbers):.2f}")
    print(f"mean {sum(numbers) / len(numbers):.2f}")
    print(f"median {median(numbers):.2f}")
    print(f"min {min(numbers):.2f}")
    print(f"max {max(numbers):.2f}")


main()
PY
