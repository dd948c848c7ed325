#!/bin/bash
# Verifier for multi-key-reward: writes /logs/verifier/reward.json with
#   correctness = fraction of N values for which the output is right,
#   style       = fraction of the 3 style rules met (shebang, executable, a comment line),
#   reward      = 1 only when both are perfect, else 0.
export PATH=/usr/bin:/bin
mkdir -p /logs/verifier
script=/app/fizzbuzz.sh
expected() {
    local i
    for ((i = 1; i <= $1; i++)); do
        if ((i % 15 == 0)); then echo FizzBuzz
        elif ((i % 3 == 0)); then echo Fizz
        elif ((i % 5 == 0)); then echo Buzz
        else echo "$i"; fi
    done
}
right=0
cases=(1 3 5 15 16 31)
for n in "${cases[@]}"; do
    if [ -f "$script" ] && [ "$(timeout 10 bash "$script" "$n" 2>/dev/null)" = "$(expected "$n")" ]; then
        right=$((right + 1))
    fi
done
style=0
[ -f "$script" ] && [ "$(head -n 1 "$script")" = "#!/bin/bash" ] && style=$((style + 1))
[ -f "$script" ] && [ -x "$script" ] && style=$((style + 1))
[ -f "$script" ] && tail -n +2 "$script" | grep -Eq '^[[:space:]]*#' && style=$((style + 1))
python3 -I -c '
import json, sys
right, total, style = (int(x) for x in sys.argv[1:])
correctness, style = right / total, style / 3
reward = 1.0 if correctness == 1 and style == 1 else 0.0
print(json.dumps({"reward": reward, "correctness": round(correctness, 4), "style": round(style, 4)}))
' "$right" "${#cases[@]}" "$style" > /logs/verifier/reward.json
cat /logs/verifier/reward.json
