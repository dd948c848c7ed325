#!/bin/bash
# the sidecar got its environment, the seeder ran to completion before the agent, both reached by name, and
# main's compose environment reaches the verifier as it does every command in the container
if [ "$(cat /app/answer.txt 2>/dev/null)" = "sidecar-secret-42 planted-by-seeder" ] && [ "$KV_URL" = "http://kv-store:7000" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
