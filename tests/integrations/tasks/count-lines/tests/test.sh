#!/bin/bash
# reward.json: the recipe reads its "reward" key when there is no reward.txt
if [ "$(tr -d ' \n' < /app/count.txt 2>/dev/null)" = "5" ]; then r=1; else r=0; fi
printf '{"reward": %s}\n' "$r" > /logs/verifier/reward.json
