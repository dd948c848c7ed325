#!/bin/bash
# Reference solution for create-file.
set -euo pipefail
printf 'Hello from evsys!\n' > /app/greeting.txt
