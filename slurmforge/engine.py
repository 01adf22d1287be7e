"""The container engine behind a small interface (Docker via its Python SDK).

The only module that imports the Docker SDK: building, importing, tagging, inspecting and
removing images, pushing them, running a one-off container, finding a volume's directory and
the containers a Compose project runs. Callers catch ``EngineError`` (any failure of the
engine), ``APIError`` (the daemon answered with an error; ``.explanation`` says why) and
``ConnectionFailed`` (the daemon connection dropped mid-stream).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import docker
import docker.auth
import docker.errors
import requests.exceptions

from slurmforge.errors import EngineUnavailable

EngineError = docker.errors.DockerException
APIError = docker.errors.APIError


class ConnectionFailed(Exception):
    """The connection to the daemon failed while a stream (a push) was running."""


HASH_LABEL = "io.slurmforge.inputs-hash"
MANIFEST_LABEL = "io.slurmforge.inputs"
START_HINT = (
    "start it with `scripts/setup` (installs docker.io if missing and runs dockerd in the "
    "background, log in .cache/dockerd.log), or by hand: `dockerd > .cache/dockerd.log 2>&1 &`"
)


@dataclass(frozen=True)
class ImageInfo:
    id: str
    labels: dict[str, str]
    size: int
    tags: tuple[str, ...]

    @property
    def inputs_hash(self) -> str | None:
        return self.labels.get(HASH_LABEL)

    @property
    def features(self) -> tuple[str, ...]:
        """The features (features.py) the image was built with (label io.slurmforge.features)."""
        return tuple(f for f in self.labels.get("io.slurmforge.features", "").split(",") if f)

    def carries(self, feature: str) -> bool:
        return feature in self.features

    @property
    def manifest(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.labels.get(MANIFEST_LABEL, "{}")))
        except ValueError:
            return {}


class Engine:
    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.api = client.api

    @classmethod
    def connect(cls) -> Engine:
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        try:
            client = docker.from_env(timeout=600)
            client.ping()
        except (docker.errors.DockerException, OSError) as exc:
            raise EngineUnavailable(
                f"Docker daemon is not reachable at {where} ({type(exc).__name__})", hint=START_HINT
            ) from None
        return cls(client)

    def carries(self, ref: str, feature: str) -> bool:
        """Whether the image ``ref`` exists here and was built with ``feature`` (e.g. pyxis)."""
        info = self.inspect(ref)
        return info is not None and info.carries(feature)

    def inspect(self, ref: str) -> ImageInfo | None:
        try:
            data = self.api.inspect_image(ref)
        except docker.errors.ImageNotFound:
            return None
        config = data.get("Config") or {}
        return ImageInfo(
            data["Id"],
            dict(config.get("Labels") or {}),
            int(data.get("Size", 0)),
            tuple(data.get("RepoTags") or ()),
        )

    def tag(self, image_id: str, ref: str) -> None:
        repo, _, tag = ref.rpartition(":")
        self.api.tag(image_id, repo, tag, force=True)

    def build(
        self, context: IO[bytes], ref: str, labels: dict[str, str]
    ) -> Iterator[dict[str, Any]]:
        """Stream the classic builder's JSON events; the image is tagged ``ref`` only on success."""
        return self.api.build(
            fileobj=context,
            custom_context=True,
            tag=ref,
            labels=labels,
            rm=True,
            forcerm=True,
            decode=True,
            pull=False,
        )

    def import_tarball(self, path: str, ref: str, changes: list[str]) -> str:
        repo, _, tag = ref.rpartition(":")
        out = self.api.import_image_from_file(path, repository=repo, tag=tag, changes=changes)
        last = out.strip().splitlines()[-1] if isinstance(out, str) else str(out)
        try:
            status = json.loads(last).get("status", "")
        except ValueError:
            status = last
        info = self.inspect(ref)
        if info is None:
            raise docker.errors.APIError(f"import did not produce {ref}: {status}")
        return info.id

    def remove(self, ref: str) -> bool:
        try:
            self.api.remove_image(ref, force=True)
        except docker.errors.ImageNotFound:
            return False
        return True

    def untag(self, ref: str) -> None:
        """Remove the tag ``ref`` only (the image stays while another tag names it)."""
        self.api.remove_image(ref, noprune=True)

    def push(self, ref: str) -> Iterator[dict[str, Any]]:
        """Push ``ref``: the daemon's JSON events."""
        repo, _, tag = ref.rpartition(":")
        try:
            yield from self.api.push(repo, tag=tag, stream=True, decode=True)
        except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
            raise ConnectionFailed(str(exc)) from None

    def has_credentials(self, registry: str) -> bool:
        """Whether the docker config holds credentials for ``registry``."""
        return bool(docker.auth.resolve_authconfig(self.api._auth_configs, registry))

    def run(
        self,
        image: str,
        command: list[str],
        environment: dict[str, str],
        volumes: dict[str, str],
        labels: dict[str, str],
        out: IO[str],
    ) -> int:
        """Run a one-off container (``volumes``: source → mount point, read-write), stream its
        output to ``out``, remove it; its exit status."""
        container = self.client.containers.run(
            image,
            command=command,
            environment=environment,
            volumes={src: {"bind": dst, "mode": "rw"} for src, dst in volumes.items()},
            labels=labels,
            detach=True,
        )
        try:
            for chunk in container.logs(stream=True, follow=True):
                out.write(chunk.decode(errors="replace"))
                out.flush()
            return int(container.wait()["StatusCode"])
        finally:
            container.remove(force=True)

    def volume_path(self, name: str) -> str | None:
        """Where the volume ``name`` lives on the daemon's host; None when it does not exist (or
        the daemon does not say)."""
        try:
            return str(self.client.volumes.get(name).attrs["Mountpoint"])
        except (docker.errors.NotFound, docker.errors.APIError, KeyError):
            return None

    def containers(self, labels: list[str]) -> list[Any]:
        """Containers (running or not) carrying every one of ``labels`` (``key=value``): the
        SDK's container objects (status, name, attrs, exec_run, logs)."""
        return self.client.containers.list(all=True, filters={"label": labels})
