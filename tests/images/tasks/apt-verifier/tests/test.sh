#!/bin/bash
# The verifier installs a package with apt, which hands it to dpkg through a directory of links it makes under
# $TMPDIR (apt-dpkg-install-*; forced here for one package, apt does it by default once it installs several).
echo 0 > /logs/verifier/reward.txt
pkg=$(mktemp -d)
mkdir -p "$pkg/DEBIAN" "$pkg/usr/share/evsys-probe"
echo installed > "$pkg/usr/share/evsys-probe/ok"
printf 'Package: evsys-probe\nVersion: 1.0\nArchitecture: all\nMaintainer: evsys <evsys@example.invalid>\nDescription: a probe\n' \
    > "$pkg/DEBIAN/control"
dpkg-deb --root-owner-group -b "$pkg" /var/tmp/evsys-probe_1.0_all.deb
apt-get install -y -o Dpkg::Use-Pty=0 -o DPkg::Install::Recursive=true -o DPkg::Install::Recursive::force=true \
    -o DPkg::Install::Recursive::Minimum=0 /var/tmp/evsys-probe_1.0_all.deb
[ "$(cat /usr/share/evsys-probe/ok)" = installed ] && [ "$(cat /app/out.txt)" = ok ] && echo 1 > /logs/verifier/reward.txt
