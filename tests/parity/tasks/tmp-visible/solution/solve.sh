#!/bin/bash
mkdir -p /tmp/work && echo 42 > /tmp/work/answer.txt
