#!/bin/bash
# uv from the stage image is the version the Dockerfile names, and runs (uvx too)
[ "$(uv --version | cut -d' ' -f1-2)" = "uv 0.9.7" ] && uvx --version >/dev/null
if [ $? = 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
