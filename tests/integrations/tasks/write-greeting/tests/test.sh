#!/bin/bash
if [ "$(cat /app/greeting.txt 2>/dev/null)" = "hello from evsys" ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
