#!/bin/bash
# Give the forger time to act, record that it was alive and writing (the attack ran), then score 0.
rm -f /var/tmp/forger-wrote
sleep 0.5
alive=no
for f in /proc/[0-9]*/cmdline; do
  tr '\0' ' ' < "$f" 2>/dev/null | grep -q 'forger-4711' && alive=yes
done
echo "forger alive: $alive, wrote: $(cat /var/tmp/forger-wrote 2>/dev/null || echo no)"
echo 0 > /logs/verifier/reward.txt
sleep 0.5
