#!/bin/sh
# A service that works for a moment before it listens (loads data, compiles rules), started in the
# background; the entrypoint hands over at once, without waiting for it.
mkdir -p /srv/late && echo "late-token-3" > /srv/late/token.txt
python3 -c "
import functools, http.server, time
end = time.monotonic() + 0.8
while time.monotonic() < end:
    pass
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory='/srv/late')
http.server.ThreadingHTTPServer(('127.0.0.1', 8081), handler).serve_forever()
" > /var/log/late-service.log 2>&1 &
exec "$@"
