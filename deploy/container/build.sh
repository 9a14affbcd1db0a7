#!/bin/sh
# Build the Despina image with podman (or buildah/docker: see the Containerfile).
#   VARIANT=cpu|cuda   PLUGINS="frontend_http ..."   BASE_IMAGE=...   TAG=despina:dev
#   ENGINE="podman"    extra arguments are passed to `$ENGINE build`.
#   PIP_CERT=/path/ca.pem   a CA bundle pip trusts while building (mounted read-only).
# Without a registry, make a base from Debian packages first:
#   mmdebstrap --variant=apt --include=python3,python3-venv,ca-certificates,libgomp1 \
#       bookworm rootfs.tar && podman import rootfs.tar localhost/debian-python:bookworm
#   BASE_IMAGE=localhost/debian-python:bookworm deploy/container/build.sh
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
variant=${VARIANT:-cpu}
case $variant in
    cpu) base=${BASE_IMAGE:-docker.io/library/python:3.11-slim-bookworm} ;;
    cuda) base=${BASE_IMAGE:-nvcr.io/nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04} ;;
    *) echo "VARIANT must be cpu or cuda" >&2; exit 2 ;;
esac
set -- --format docker --build-arg "BASE_IMAGE=$base" --build-arg "VARIANT=$variant" \
    ${PLUGINS:+--build-arg "PLUGINS=$PLUGINS"} \
    ${PIP_CERT:+--build-arg "PIP_CERT=/run/pip-ca.pem" --volume "$PIP_CERT:/run/pip-ca.pem:ro"} "$@"
exec ${ENGINE:-podman} build "$@" --ignorefile "$root/deploy/container/containerignore" \
    -f "$root/deploy/container/Containerfile" -t "${TAG:-despina:$variant}" "$root"
