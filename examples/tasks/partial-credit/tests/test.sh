#!/bin/bash
# Verifier for partial-credit: reward = (checks passed) / 5, e.g. 0.6 for 3 of 5.
export PATH=/usr/bin:/bin
mkdir -p /logs/verifier
root=/app/project
passed=0
check() {
    local name=$1
    shift
    if "$@" >/dev/null 2>&1; then
        echo "PASS $name"
        passed=$((passed + 1))
    else
        echo "FAIL $name"
    fi
}
check "README.md" bash -c "[ \"\$(head -n 1 $root/README.md)\" = '# calc' ]"
check "__init__.py" test -f "$root/src/calc/__init__.py"
check "core.add" timeout 10 python3 -I -c "
import importlib.util
spec = importlib.util.spec_from_file_location('core', '$root/src/calc/core.py')
core = importlib.util.module_from_spec(spec)
spec.loader.exec_module(core)
assert core.add(2, 3) == 5 and core.add('a', 'b') == 'ab' and core.add(-1.5, 1) == -0.5
"
check ".gitignore" grep -qx '__pycache__/' "$root/.gitignore"
check "VERSION" bash -c "[ \"\$(cat $root/VERSION)\" = '0.1.0' ] && [ \$(wc -l < $root/VERSION) -le 1 ]"
python3 -I -c 'import sys; print(int(sys.argv[1]) / 5)' "$passed" > /logs/verifier/reward.txt
echo "reward: $(cat /logs/verifier/reward.txt)"
