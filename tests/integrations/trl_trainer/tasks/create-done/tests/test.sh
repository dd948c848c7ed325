#!/bin/bash
# Reward 1 when /app/done.txt exists (the agent created it in the sandbox), else 0.
export PATH=/usr/bin:/bin
mkdir -p /logs/verifier
if [ -f /app/done.txt ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
