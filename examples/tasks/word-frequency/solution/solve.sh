#!/bin/bash
# Reference solution for word-frequency; relies on DATA_DIR, TOP_N and REPORT_PATH from the task's Dockerfile.
set -euo pipefail
export LC_ALL=C
tr 'A-Z' 'a-z' < "$DATA_DIR/corpus.txt" | tr -cs 'a-z' '\n' | grep -v '^$' | sort | uniq -c \
    | sort -k1,1nr -k2,2 | head -n "$TOP_N" | sed -E 's/^ *([0-9]+) (.*)$/\2 \1/' > "$REPORT_PATH"
