#!/bin/bash
# Reference solution for nop-must-fail (rewrites the file in place; needs no write access to its directory).
set -euo pipefail
updated=$(sed -e 's/^port = .*/port = 8080/' -e 's/^debug = .*/debug = false/' "$CONFIG_FILE")
printf '%s\n' "$updated" > "$CONFIG_FILE"
