"""Where the Docker daemon answers when $DOCKER_HOST does not say: read by the engine (engine.py)
and by the no-op fast path (fastpath.py), which asks the daemon without the Docker SDK and so
imports nothing of engine.py."""

DEFAULT_HOST = "unix:///var/run/docker.sock"
