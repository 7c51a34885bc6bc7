# sluice's container image: a static binary on a distroless base with no
# shell, run as an unprivileged user.
#
#   docker build --build-arg VERSION=v1.2.3 --build-arg REVISION=$(git rev-parse HEAD) -t sluice .
#   docker run --rm -p 8080:8080 sluice                     # the gateway, built-in demo rules
#   docker run --rm sluice rules --listen :8083 ...         # any other command
#
# deploy/docker_test.go checks this file and runs its build command.

ARG GO_VERSION=1.26.8

# The build runs on the builder's own platform and cross-compiles for the
# target, so a multi-platform build needs no emulation.
FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG REVISION=unknown
ARG TARGETOS
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} go build -trimpath -ldflags "-s -w -X main.version=${VERSION} -X main.revision=${REVISION}" -o /out/sluice ./cmd/sluice

# No shell, no package manager: CA certificates, /etc/passwd with the
# nonroot user (65532), and the binary.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
USER 65532:65532
# gateway 8080, rls 8081 (gRPC), balancer 8082, rules 8083, metrics 9464.
EXPOSE 8080 8081 8082 8083 9464
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["gateway", "--listen", ":8080"]
