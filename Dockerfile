# tollgate in an empty image. Nothing is compiled in here: no base image can
# be pulled on this machine, so the static binary is built on the host first,
# and the shell comes from Debian's busybox-static. From the repository root:
#
#   CGO_ENABLED=0 go build -o tollgate .
#   apt-get install busybox-static && cp /bin/busybox busybox
#   docker build -t tollgate .
#
# Run it with the Docker provider (the socket is read-only to tollgate):
#
#   docker run -d -v /var/run/docker.sock:/var/run/docker.sock:ro \
#     -p 5432:5432 -p 127.0.0.1:8080:8080 tollgate \
#     --entryPoints.db.address=:5432 --providers.docker --api.address=:8080
#
# No built-in HEALTHCHECK, as in Traefik's image: the API and /ping are
# opt-in, so a check that asks them would mark a container without them
# unhealthy. The health checks written for Traefik's image run here:
#   ["CMD", "traefik", "healthcheck", "--ping"]  (/usr/local/bin/traefik is a
#     link to /tollgate, deploy/image; the subcommand reads TOLLGATE_ or
#     TRAEFIK_ variables and the configuration file, not the flags given to
#     the container's tollgate)
#   ["CMD-SHELL", "wget -q --spider http://localhost:8080/ping || exit 1"]
#     (/bin/sh and /bin/wget are busybox, static; links in deploy/image)
#
# tollgate is PID 1 here: an upgrade in place (SIGUSR2) would end the
# container with the old process. Containers roll instead
# (docs/operations/upgrading.md, "Containers").
FROM scratch
COPY tollgate /tollgate
COPY busybox /bin/busybox
COPY deploy/image/ /
EXPOSE 8080
ENTRYPOINT ["/tollgate"]
