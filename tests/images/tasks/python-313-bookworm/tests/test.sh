#!/bin/bash
# The declared base, exactly: bookworm's userland (OpenSSL 3.0, Debian 12), Python 3.13 in /usr/local with a
# `python` command and a pip that installs (no PEP 668 marker).
cat /app/versions.txt
grep -qx 'Python 3\.13\.[0-9]*' /app/versions.txt \
  && grep -q '^OpenSSL 3\.0\.' /app/versions.txt \
  && [ "$(cut -d. -f1 /etc/debian_version)" = 12 ] \
  && [ "$(command -v python)" = /usr/local/bin/python ] \
  && [ "$(command -v pip)" = /usr/local/bin/pip ] \
  && python -c "import os, sysconfig; assert not os.path.exists(sysconfig.get_path('stdlib') + '/EXTERNALLY-MANAGED')"
if [ $? = 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
