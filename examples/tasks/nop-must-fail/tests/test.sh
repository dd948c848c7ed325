#!/bin/bash
# Verifier for nop-must-fail: the config must equal the original with port = 8080 and debug = false.
# The untouched workspace fails, so an agent that does nothing scores 0.
export PATH=/usr/bin:/bin
mkdir -p /logs/verifier
if [ -f /app/etc/app.conf ] && cmp -s /tests/expected.conf /app/etc/app.conf; then
    echo "config is correct"
    echo 1 > /logs/verifier/reward.txt
else
    echo "config differs from what was asked:"
    diff /tests/expected.conf /app/etc/app.conf
    echo 0 > /logs/verifier/reward.txt
fi
