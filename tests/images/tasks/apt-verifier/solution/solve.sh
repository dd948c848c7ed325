#!/bin/bash
set -e
echo ok > /app/out.txt
