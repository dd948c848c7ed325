#!/bin/bash
# Reference solution for partial-credit.
set -euo pipefail
mkdir -p /app/project/src/calc
cd /app/project
printf '# calc\n\nA tiny calculator package.\n' > README.md
: > src/calc/__init__.py
printf 'def add(a, b):\n    """Return a + b."""\n    return a + b\n' > src/calc/core.py
printf '__pycache__/\n*.pyc\n' > .gitignore
printf '0.1.0\n' > VERSION
