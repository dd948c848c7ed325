#!/bin/bash
# Reward 1 when the task's MCP server answered a lookup of "kumquat" (it logs each call it serves).
if grep -q '"topic": "kumquat"' /app/facts-calls.jsonl 2>/dev/null; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi
