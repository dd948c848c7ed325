#!/bin/bash
# One request, no retry: the service the image's ENTRYPOINT started must already be listening.
python3 -c "
import urllib.request
print(urllib.request.urlopen('http://127.0.0.1:8081/token.txt', timeout=5).read().decode().strip())
" > /app/token.txt
