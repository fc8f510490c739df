# syntax=docker/dockerfile:1
# The agent-sandbox-controller image for a Docker/BuildKit user: the very root filesystem that
# `make image` writes as an OCI archive with no engine (hack/image/build.py: Debian bookworm's
# Python 3.11 and the hash-locked runtime wheels, unpacked from locked inputs; no shell). One
# recipe, two outputs:
#
#   make image                      # also leaves the root filesystem in build/image/rootfs.tar
#   docker build -t registry.example.com/agent-sandbox-controller:0.1.0 .
#
# arm64 (no emulator needed: nothing is run while building FROM scratch):
#
#   make image-arm64                # leaves build/image-arm64/rootfs.tar
#   docker build --platform linux/arm64 --build-arg ROOTFS=build/image-arm64/rootfs.tar \
#     -t registry.example.com/agent-sandbox-controller:0.1.0-arm64 .
#
# `make image` alone gives dist/agent-sandbox-controller-<version>-oci.tar, pushed as it is with
# crane, skopeo or oras (docs/deploy.md). Entrypoint, user and environment are the OCI config's.
FROM scratch
ARG ROOTFS=build/image/rootfs.tar
ADD ${ROOTFS} /
ENV PATH=/usr/bin PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 65532:65532
WORKDIR /
EXPOSE 8080 8081
ENTRYPOINT ["/usr/bin/python3.11", "/usr/bin/agent-sandbox-controller"]
