# ringlb container image.
#
#   docker build -t ringlb --build-arg VERSION=$(git describe --always --dirty) .
#   docker run --rm -p 8080:8080 -p 127.0.0.1:9901:9901 \
#     -v "$PWD/my-config.yaml:/etc/ringlb/config.yaml:ro" ringlb
#
# Inside a container, listen and admin_listen must be 0.0.0.0:PORT to be
# reachable from outside it: 127.0.0.1 is the container's own loopback. The
# config.yaml baked in below is the repository's default (the demo's, with
# loopback listeners and upstreams); mount your own over
# /etc/ringlb/config.yaml, as examples/kubernetes/ringlb.yaml does. The admin
# port (9901) can reload the config and reveals the ring: publish it only to
# trusted networks (as above, on the host's loopback), never to the world.
# Reload with `curl -X POST http://127.0.0.1:9901/reload` or `docker kill -s HUP`.

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
COPY config.yaml /etc/ringlb/config.yaml
USER nonroot:nonroot
EXPOSE 8080 9901
# ENTRYPOINT is the binary alone and CMD its default arguments, so that
# `docker run IMAGE validate -config ...` and a Kubernetes container's
# `args` replace the arguments instead of being appended to them.
ENTRYPOINT ["/ringlb"]
CMD ["serve", "-config", "/etc/ringlb/config.yaml"]
