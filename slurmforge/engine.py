"""The container engine behind a small interface of slurmforge's own types (Docker, through its
Python SDK, which is imported only when an Engine connects).

Building, importing, tagging, inspecting and removing images, pushing them, running a one-off
container, finding a volume's directory, and the containers of a Compose project (`Container`,
with `Engine.exec` and `Engine.logs`). Every failure of the engine is an ``EngineError``: an
``APIError`` when the daemon answered with an error (``.explanation`` says why), a
``ConnectionFailed`` when its connection dropped mid-stream (a push). The no-op build's fast
path asks the daemon over its unix socket with the standard library alone (fastpath.py).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from slurmforge.docker_host import DEFAULT_HOST
from slurmforge.errors import EngineUnavailable
from slurmforge.exec_kept import exec_kept

if TYPE_CHECKING:
    import docker


class EngineError(Exception):
    """The engine failed."""


class APIError(EngineError):
    """The daemon answered with an error."""

    def __init__(self, message: str, explanation: str | None = None) -> None:
        super().__init__(message)
        self.explanation = explanation


class NotFound(APIError):
    """What was asked for (an image, a volume, a container) does not exist."""


class ConnectionFailed(EngineError):
    """The connection to the daemon failed while a stream (a push) was running."""


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    """The SDK's exceptions as this module's."""
    import docker.errors
    import requests.exceptions

    try:
        yield
    except docker.errors.NotFound as exc:
        raise NotFound(str(exc), exc.explanation) from None
    except docker.errors.APIError as exc:
        raise APIError(str(exc), exc.explanation) from None
    except docker.errors.DockerException as exc:
        raise EngineError(str(exc)) from None
    except (requests.exceptions.ConnectionError, requests.exceptions.Timeout) as exc:
        raise ConnectionFailed(str(exc)) from None


@dataclass(frozen=True)
class Container:
    """A container as listed: its name, status (running, exited, …), labels and the daemon's
    record of it (``attrs``): its whole record (State, HostConfig, …), or for a listing that
    was not ``full``, the listing's (State as a word, Status, Ports, Mounts)."""

    id: str
    name: str
    status: str
    labels: dict[str, str] = field(default_factory=dict)
    attrs: dict[str, Any] = field(default_factory=dict, repr=False)


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


def _listed(record: dict[str, Any]) -> Container:
    """A container from the engine's listing (GET /containers/json): its names, a state word."""
    labels = dict(record.get("Labels") or {})
    return Container(record["Id"], record["Names"][0].lstrip("/"), record["State"], labels, record)


class _Containers:
    """The engine's containers and volumes (the deploy side's: one-off runs, a cluster's
    containers found by label)."""

    client: docker.DockerClient

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
        with _translated():
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
            with _translated():
                return str(self.client.volumes.get(name).attrs["Mountpoint"])
        except (APIError, KeyError):
            return None

    def volumes(self, labels: list[str]) -> list[str]:
        """Names of the volumes carrying every one of ``labels``."""
        with _translated():
            return sorted(v.name for v in self.client.volumes.list(filters={"label": labels}))

    def remove_volume(self, name: str) -> None:
        with _translated():
            self.client.volumes.get(name).remove()

    def remove_container(self, container: Container, stop_timeout: int | None = None) -> None:
        """Remove the container; with ``stop_timeout``, stopped first as `docker stop` does
        (SIGTERM, SIGKILL after that many seconds), so that a daemon saves its state."""
        with _translated():
            found = self.client.containers.get(container.id)
            if stop_timeout is not None:
                found.stop(timeout=stop_timeout)
            found.remove(force=True)

    def networks(self, labels: list[str]) -> list[str]:
        """Names of the networks carrying every one of ``labels``."""
        with _translated():
            return sorted(n.name for n in self.client.networks.list(filters={"label": labels}))

    def remove_network(self, name: str) -> None:
        with _translated():
            self.client.networks.get(name).remove()

    def containers(self, labels: list[str], full: bool = True) -> list[Container]:
        """Containers (running or not) carrying every one of ``labels`` (``key=value``). Not
        ``full``: their records as the engine lists them (name, state, status, labels, ports,
        mounts), without a request more for each container's whole record, which the polls of
        a deploy's waits do not read."""
        with _translated():
            found = self.client.containers.list(
                all=True, filters={"label": labels}, sparse=not full
            )
        if full:
            return [Container(c.id, c.name, c.status, dict(c.labels), c.attrs) for c in found]
        return [_listed(c.attrs) for c in found]

    def exec(self, container: Container, argv: list[str]) -> tuple[int, str]:
        """Run ``argv`` in the container: its exit status and output (``exec_kept``). The
        container is named by its ID alone (no request for its record first); one that has
        stopped since it was listed is the engine's refusal of the exec."""
        with _translated():
            return exec_kept(self.client.containers.prepare_model({"Id": container.id}), argv)

    def logs(self, container: Container, tail: int) -> str:
        """The container's last ``tail`` lines of output."""
        with _translated():
            return self.client.containers.get(container.id).logs(tail=tail).decode(errors="replace")


class Engine(_Containers):
    """The one seam to the Docker engine: images here, containers and volumes in _Containers."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client
        self.api = client.api
        self._platform: str | None = None

    @classmethod
    def connect(cls) -> Engine:
        import docker

        where = os.environ.get("DOCKER_HOST", DEFAULT_HOST)
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
            with _translated():
                data = self.api.inspect_image(ref)
        except NotFound:
            return None
        config = data.get("Config") or {}
        return ImageInfo(
            data["Id"],
            dict(config.get("Labels") or {}),
            int(data.get("Size", 0)),
            tuple(data.get("RepoTags") or ()),
        )

    def tagged(self) -> dict[str, ImageInfo]:
        """Every tagged image here, by each of its tags: one call to the daemon (what inspect
        says of a tag, for a planner that asks about thousands)."""
        with _translated():
            listed = self.api.images()
        out = {}
        for data in listed:
            tags = tuple(t for t in data.get("RepoTags") or () if t != "<none>:<none>")
            info = ImageInfo(
                data["Id"], dict(data.get("Labels") or {}), int(data.get("Size", 0)), tags
            )
            out.update(dict.fromkeys(tags, info))
        return out

    def read_files(self, ref: str, directory: str) -> dict[str, bytes]:
        """The regular files directly in ``directory`` of image ``ref`` (name → content), read
        from a container that is created but never started; {} when the image lacks it."""
        import tarfile
        import tempfile

        with _translated():
            container = self.api.create_container(ref, command=["true"], entrypoint=[])
        try:
            with tempfile.TemporaryFile() as buf:
                try:
                    with _translated():
                        stream, _ = self.api.get_archive(container["Id"], directory.rstrip("/"))
                        for chunk in stream:
                            buf.write(chunk)
                except NotFound:
                    return {}
                buf.seek(0)
                out = {}
                with tarfile.open(fileobj=buf) as tar:
                    for member in tar:
                        name = member.name.split("/", 1)[-1]
                        if member.isfile() and "/" not in name:
                            out[name] = tar.extractfile(member).read()  # type: ignore[union-attr]
                return out
        finally:
            with _translated():
                self.api.remove_container(container["Id"], force=True)

    def tag(self, image_id: str, ref: str) -> None:
        repo, _, tag = ref.rpartition(":")
        with _translated():
            self.api.tag(image_id, repo, tag, force=True)

    def build(
        self, context: IO[bytes], ref: str, labels: dict[str, str], platform: str | None = None
    ) -> Iterator[dict[str, Any]]:
        """Stream the classic builder's JSON events; the image is tagged ``ref`` only on success.
        ``platform`` (linux/arm64): the image's, when not the daemon's own (its RUN steps then
        run through qemu-user, registered with binfmt_misc)."""
        extra = {"platform": platform} if platform and platform != self.platform() else {}
        with _translated():
            yield from self.api.build(
                fileobj=context,
                custom_context=True,
                tag=ref,
                labels=labels,
                rm=True,
                forcerm=True,
                decode=True,
                pull=False,
                **extra,
            )

    def platform(self) -> str:
        """The daemon's own platform (linux/amd64)."""
        if self._platform is None:
            with _translated():
                version = self.api.version()
            self._platform = f"{version.get('Os', 'linux')}/{version['Arch']}"
        return self._platform

    def build_rootfs(self, tarball: Path, ref: str, changes: list[str], platform: str) -> str:
        """A root filesystem tarball as image ``ref`` of ``platform`` (FROM scratch, ADD);
        ``changes``: Dockerfile instructions after it. Returns the image ID."""
        import io
        import tarfile
        import tempfile

        dockerfile = "\n".join(["FROM scratch", "ADD rootfs.tar /", *changes, ""]).encode()
        with tempfile.TemporaryFile(dir=tarball.parent) as context:
            with tarfile.open(fileobj=context, mode="w") as tar:
                info = tarfile.TarInfo("Dockerfile")
                info.size = len(dockerfile)
                tar.addfile(info, io.BytesIO(dockerfile))
                tar.add(str(tarball), arcname="rootfs.tar")
            context.seek(0)
            for event in self.build(context, ref, {}, platform):
                if "error" in event:
                    detail = event.get("errorDetail", {}).get("message") or event["error"]
                    raise APIError(f"building {ref} from {tarball.name}: {detail.strip()}")
        info = self.inspect(ref)
        if info is None:
            raise APIError(f"the build of {ref} from {tarball.name} left no image")
        return info.id

    def import_tarball(self, path: str, ref: str, changes: list[str]) -> str:
        repo, _, tag = ref.rpartition(":")
        with _translated():
            out = self.api.import_image_from_file(path, repository=repo, tag=tag, changes=changes)
        last = out.strip().splitlines()[-1] if isinstance(out, str) else str(out)
        try:
            status = json.loads(last).get("status", "")
        except ValueError:
            status = last
        info = self.inspect(ref)
        if info is None:
            raise APIError(f"import did not produce {ref}: {status}")
        return info.id

    def remove(self, ref: str) -> bool:
        try:
            with _translated():
                self.api.remove_image(ref, force=True)
        except NotFound:
            return False
        return True

    def untag(self, ref: str) -> None:
        """Remove the tag ``ref`` only (the image stays while another tag names it)."""
        with _translated():
            self.api.remove_image(ref, noprune=True)

    def push(self, ref: str) -> Iterator[dict[str, Any]]:
        """Push ``ref``: the daemon's JSON events."""
        repo, _, tag = ref.rpartition(":")
        with _translated():
            yield from self.api.push(repo, tag=tag, stream=True, decode=True)

    def has_credentials(self, registry: str) -> bool:
        """Whether the docker config holds credentials for ``registry``."""
        import docker.auth

        return bool(docker.auth.resolve_authconfig(self.api._auth_configs, registry))
