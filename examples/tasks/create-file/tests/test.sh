#!/bin/bash
# Verifier for create-file: reward 1 when /app/greeting.txt holds exactly "Hello from evsys!\n", else 0.
export PATH=/usr/bin:/bin
mkdir -p /logs/verifier
target=/app/greeting.txt
if [ -f "$target" ] && [ ! -L "$target" ] && printf 'Hello from evsys!\n' | cmp -s - "$target"; then
    echo "greeting.txt is correct"
    echo 1 > /logs/verifier/reward.txt
else
    echo "greeting.txt is missing or holds the wrong text"
    echo 0 > /logs/verifier/reward.txt
fi
