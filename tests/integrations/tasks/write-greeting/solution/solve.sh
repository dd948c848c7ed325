#!/bin/bash
echo "hello from evsys" > /app/greeting.txt
