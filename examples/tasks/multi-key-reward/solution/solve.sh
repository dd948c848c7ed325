#!/bin/bash
# Reference solution for multi-key-reward.
set -euo pipefail
cat > /app/fizzbuzz.sh <<'SH'
#!/bin/bash
# Print FizzBuzz from 1 to N (the first argument).
for ((i = 1; i <= $1; i++)); do
    if ((i % 15 == 0)); then echo FizzBuzz
    elif ((i % 3 == 0)); then echo Fizz
    elif ((i % 5 == 0)); then echo Buzz
    else echo "$i"; fi
done
SH
chmod +x /app/fizzbuzz.sh
