# tollgate in an empty image. Nothing is compiled in here: no base image can
# be pulled on this machine, so the static binary is built on the host first.
# From the repository root:
#
#   CGO_ENABLED=0 go build -o tollgate .
#   docker build -t tollgate .
#
# Run it with the Docker provider (the socket is read-only to tollgate):
#
#   docker run -d -v /var/run/docker.sock:/var/run/docker.sock:ro \
#     -p 5432:5432 -p 127.0.0.1:8080:8080 tollgate \
#     --entryPoints.db.address=:5432 --providers.docker --api.address=:8080
#
# The health check asks the admin API for /ping (there is no shell or curl in
# the image: `tollgate healthcheck` does the request) on 127.0.0.1:8080. The
# API is opt-in: run with --api.address=:8080 as above (or --api, or
# --metrics.prometheus). For another port set TOLLGATE_API_ADDRESS in the
# container (flags given to tollgate do not reach the health check); without
# the API, run with --no-healthcheck or the container shows as unhealthy.
#
# tollgate is PID 1 here: an upgrade in place (SIGUSR2) would end the
# container with the old process. Containers roll instead (README,
# "Upgrading in place").
# /usr/local/bin/traefik is a symbolic link to /tollgate (deploy/image), so
# that a health check written for Traefik's image,
# ["CMD", "traefik", "healthcheck", "--ping"], runs tollgate's.
FROM scratch
COPY tollgate /tollgate
COPY deploy/image/ /
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 CMD ["/tollgate", "healthcheck"]
ENTRYPOINT ["/tollgate"]
