# ringlb container image.
#
#   docker build -t ringlb --build-arg VERSION=$(git describe --always --dirty) .
#   docker run --rm -p 8080:8080 \
#     -v "$PWD/my-config.yaml:/etc/ringlb/config.yaml:ro" ringlb
#
# Inside a container, an address must be 0.0.0.0:PORT to be reachable from
# outside it: 127.0.0.1 is the container's own loopback. The config baked in
# below (examples/configs/container.yaml) listens on 0.0.0.0:8080 and keeps
# the admin listener on the container's loopback; its upstreams are
# placeholders. Mount your own over /etc/ringlb/config.yaml, as
# examples/kubernetes/ringlb.yaml does. The admin port (9901) can reload the
# config and reveals the ring: a config that opens it (admin_listen:
# 0.0.0.0:9901) should be published only to trusted networks
# (-p 127.0.0.1:9901:9901, the host's loopback), never to the world.
# ringlb reloads the config when the file changes on disk (a directory
# mount follows edits; a single-file mount keeps the file it was given when
# an editor replaces it by rename), or on `docker kill -s HUP`.

FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first: this layer is reused while go.mod and go.sum stand still.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
# Static binary (no cgo: distroless/static has no libc), no local paths in it.
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ringlb ./cmd/ringlb

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ringlb /ringlb
COPY examples/configs/container.yaml /etc/ringlb/config.yaml
USER nonroot:nonroot
EXPOSE 8080 9901
# ENTRYPOINT is the binary alone and CMD its default arguments, so that
# `docker run IMAGE validate -config ...` and a Kubernetes container's
# `args` replace the arguments instead of being appended to them.
ENTRYPOINT ["/ringlb"]
CMD ["serve", "-config", "/etc/ringlb/config.yaml"]
