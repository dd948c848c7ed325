#!/bin/bash
# 1 only on the built image: the RUN steps' package and marker are there, and the solution used the package
marker=$(cat /etc/evsys-test-marker 2>&1)
echo "marker: $marker"
echo "tree: $(command -v tree)"
cat /app/tree.txt
if [ "$marker" = built-by-run ] && command -v tree >/dev/null && grep -q apt.conf.d /app/tree.txt; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
