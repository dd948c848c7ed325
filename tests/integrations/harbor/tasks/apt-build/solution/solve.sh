#!/bin/bash
tree --noreport /etc/apt/apt.conf.d > /app/tree.txt
