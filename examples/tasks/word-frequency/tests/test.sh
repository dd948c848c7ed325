#!/bin/bash
# Verifier for word-frequency: recomputes the top 5 words from the verifier's own copy of the corpus
# (the workspace copy may have been changed) and compares with /app/top_words.txt. Reward 1 or 0.
export PATH=/usr/bin:/bin LC_ALL=C
mkdir -p /logs/verifier
expected=$(tr 'A-Z' 'a-z' < /tests/corpus.txt | tr -cs 'a-z' '\n' | grep -v '^$' | sort | uniq -c \
    | sort -k1,1nr -k2,2 | head -n 5 | sed -E 's/^ *([0-9]+) (.*)$/\2 \1/')
actual=$(cat /app/top_words.txt 2>/dev/null)
echo "expected:"; echo "$expected"; echo "actual:"; echo "$actual"
if [ -f /app/top_words.txt ] && [ "$expected" = "$actual" ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
