# Agent State Sidecar image.
#   docker build -t agentstate-sidecar .
#   sidecar token --role write --namespace my-team --append auth.toml     # prints the token (keep it)
#   docker run -v state:/data -v "$PWD/secrets:/etc/sidecar:ro" -p 7421:7421 agentstate-sidecar
# /etc/sidecar must hold auth.toml (token hashes, see docs/security.md) and tls.crt / tls.key (the
# server's certificate chain and key): the TCP listener binds every interface of the container, and
# the sidecar refuses to serve a non-loopback address without TLS and credentials. Reload auth.toml
# with `docker kill --signal HUP <container>`.
# Stage 1 builds wheels (the Cython hot path needs a compiler); stage 2 only installs them.
FROM python:3.11-slim-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY _native ./_native
COPY sidecar ./sidecar
COPY clients/python ./clients/python
ENV SIDECAR_REQUIRE_EXTENSIONS=1
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11-slim-bookworm
RUN useradd --system --uid 10001 --create-home --home-dir /data sidecar
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels
USER sidecar
WORKDIR /data
VOLUME ["/data"]
EXPOSE 7421
# The unix socket stays in the volume (0600, in the 0700 data directory); TCP is TLS with tokens.
ENTRYPOINT ["sidecar", "serve", "--data-dir", "/data/sidecar-data"]
CMD ["--listen", "unix:/data/sidecar-data/sidecar.sock", "--listen", "0.0.0.0:7421", \
     "--auth-file", "/etc/sidecar/auth.toml", "--tls-cert", "/etc/sidecar/tls.crt", "--tls-key", "/etc/sidecar/tls.key"]
# Health checking needs no token; it goes over the unix socket (no TLS name to match).
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s \
  CMD python -c "import grpc,sys; from grpc_health.v1 import health_pb2 as h, health_pb2_grpc as g; \
sys.exit(0 if g.HealthStub(grpc.insecure_channel('unix:/data/sidecar-data/sidecar.sock')).Check(h.HealthCheckRequest(), timeout=2).status == 1 else 1)"
