#!/bin/sh
# The guest side of `cgpu probe --backend krunkit --vm-image DISK`: at boot, tell the host
# the VM is up (podman machine's readiness protocol: "Ready" to vsock port 1025 of the host,
# CID 2), run cgpu's probe (probe.py, put in the share by the host) in the probe image with
# the GPU, and leave its output in the virtio-fs share the host reads: probe.out, probe.err,
# then probe.rc last (by rename, so it is complete).
set -u
mnt=/run/cgpu-results
mkdir -p "$mnt"
mount -t virtiofs cgpu-results "$mnt" || exit 1
echo Ready | socat - VSOCK-CONNECT:2:1025

image=$(sed -n 's/.*"probe_image": *"\([^"]*\)".*/\1/p' "$mnt/request.json")
[ -n "$image" ] || image=localhost/cgpu-venus-probe:latest
# cgpu's own probe (probe.py in the share), run by the image's python3, never the image's entry point.
podman run --rm --pull=never --network=none --device /dev/dri \
    --volume "$mnt/probe.py:/cgpu-probe.py:ro" --entrypoint python3 \
    "$image" /cgpu-probe.py >"$mnt/probe.out" 2>"$mnt/probe.err"
echo "$?" >"$mnt/probe.rc.tmp"
mv "$mnt/probe.rc.tmp" "$mnt/probe.rc"
sync
systemctl poweroff
