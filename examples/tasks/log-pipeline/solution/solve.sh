#!/bin/bash
# Reference solution for log-pipeline.
set -euo pipefail
export LC_ALL=C
cut -d ' ' -f 1,9 "$LOG_FILE" | grep -E ' 5[0-9][0-9]$' | cut -d ' ' -f 1 | sort | uniq -c \
    | sort -k1,1nr -k2,2 | head -n 3 | sed -E 's/^ *([0-9]+) (.*)$/\2 \1/' > /app/errors_by_ip.txt
