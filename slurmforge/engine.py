"""The container engine behind a small interface (Docker via its Python SDK)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import docker
import docker.errors

from slurmforge.errors import EngineUnavailable

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
        """The optional features the image was built with (label io.slurmforge.features)."""
        return tuple(f for f in self.labels.get("io.slurmforge.features", "").split(",") if f)

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
