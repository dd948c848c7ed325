#!/bin/bash
if [ "$(cat /app/token.txt 2>/dev/null)" = late-token-3 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
