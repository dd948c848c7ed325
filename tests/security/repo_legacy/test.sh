#!/bin/bash
# evsys's repository grading as it was before fresh-sandbox grading (see __init__.py).
# Restore the files the test patch touches (the agent may have edited them), apply it, run the listed tests.
cd /testbed || exit 1
OUT=/logs/verifier
mkdir -p "$OUT"
PY=$(command -v python3 || command -v python)
for f in $(sed -n 's|^diff --git a/\(.*\) b/.*$|\1|p' /tests/test.patch); do
  if git -c safe.directory=* -c core.hooksPath=/dev/null cat-file -e "HEAD:$f" 2>/dev/null; then git -c safe.directory=* -c core.hooksPath=/dev/null checkout -q HEAD -- "$f"; else rm -rf -- "$f"; fi
done
if [ -s /tests/test.patch ] && ! git -c safe.directory=* -c core.hooksPath=/dev/null apply --verbose /tests/test.patch > "$OUT/test_patch.log" 2>&1; then
  "$PY" /tests/evsys_grade.py /tests/config.json "$OUT" --cause \
    "the test patch does not apply: $(grep -E '^error:' "$OUT/test_patch.log" | tail -n 2 | tr '\n' ' ')"
  exit 0
fi
exec "$PY" /tests/evsys_grade.py /tests/config.json "$OUT"
