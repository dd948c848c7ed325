#!/bin/bash
set -e
{ python --version; openssl version; python -c "import ssl; print(ssl.OPENSSL_VERSION)"; } > /app/versions.txt
