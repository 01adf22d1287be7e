"""Multi-arch tags: a published tag whose cells were built for several arches names one manifest
list (an OCI image index) that holds each arch's image, so that `docker pull` and the kubelet
take their node's arch.

Each arch's image is pushed first under the tag with -<arch> appended; the list is then made from
those pushes by digest (never by tag: what it names is exactly what was pushed), with the Docker
CLI's `docker manifest` (the standard client for lists, with the daemon client's credentials), and
read back from the registry: a list whose entries are not those digests, each with its own
platform, is refused.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable

from slurmforge.errors import ConfigError, SlurmforgeError

Run = Callable[..., subprocess.CompletedProcess[str]]
LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


class ManifestListError(SlurmforgeError):
    """The registry did not take the list, or holds another one than was pushed."""


# what docker (the daemon's push and the CLI's manifest commands alike) says of a registry it
# cannot reach: bad input (a wrong --registry, one not running), not a failed operation
UNREACHABLE = re.compile(
    r"connection reset|connection refused|\bEOF\b|timeout|timed out|no such host"
    r"|network is unreachable|no route to host",
    re.IGNORECASE,
)
UNREACHABLE_HINT = "check --registry / the set's registry, and that it is running"


def unreachable(registry: str, message: str, attempts: int | None = None) -> ConfigError | None:
    """The one-line refusal for ``message`` when it says ``registry`` cannot be reached; None
    when it says something else."""
    if not UNREACHABLE.search(message):
        return None
    tries = f" ({attempts} attempts)" if attempts is not None else ""
    return ConfigError(
        f"registry {registry} is unreachable{tries}: {message}", hint=UNREACHABLE_HINT
    )


def arch_tag(tag: str, arch: str) -> str:
    """Where one arch's image of a multi-arch ``tag`` is pushed."""
    return f"{tag}-{arch}"


def _registry(ref: str) -> str:
    """The registry of a tag this module handles (each names its registry)."""
    return ref.split("/", 1)[0]


def _insecure(ref: str) -> list[str]:
    """A registry on this host speaks plain HTTP (as the daemon allows for loopback)."""
    host = ref.split("/", 1)[0]
    return ["--insecure"] if host.rsplit(":", 1)[0] in LOOPBACK or host in LOOPBACK else []


def _docker(run: Run, *args: str) -> str:
    proc = run(["docker", *args], capture_output=True, text=True, check=False)
    if proc.returncode:
        said = " / ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise unreachable(_registry(args[-1]), said) or ManifestListError(
            f"docker {' '.join(args[:2])} {args[-1]} failed: {said}"
        )
    return proc.stdout


def publish(tag: str, members: dict[str, str], run: Run = subprocess.run) -> str:
    """Make ``tag`` the list of ``members`` (arch → digest of that arch's image in the same
    repository); its digest."""
    repo = tag.rsplit(":", 1)[0]
    refs = [f"{repo}@{digest}" for digest in members.values()]
    insecure = _insecure(tag)
    run(["docker", "manifest", "rm", tag], capture_output=True, text=True, check=False)
    _docker(run, "manifest", "create", *insecure, tag, *refs)
    pushed = _docker(run, "manifest", "push", "--purge", *insecure, tag).strip().splitlines()
    digest = pushed[-1].strip() if pushed else ""
    if not digest.startswith("sha256:"):
        raise ManifestListError(f"docker manifest push {tag} printed no digest: {pushed}")
    check(tag, members, run)
    return digest


def image_digest(ref: str, arch: str, run: Run = subprocess.run) -> str | None:
    """The digest of the one image the registry holds at ``ref``, checked to be ``arch``'s;
    None when it holds nothing there."""
    proc = run(["docker", "manifest", "inspect", "-v", *_insecure(ref), ref],
               capture_output=True, text=True, check=False)  # fmt: skip
    if proc.returncode:
        said = (proc.stderr or proc.stdout).strip()
        if "no such manifest" in said.lower() or "manifest unknown" in said.lower():
            return None
        last = (said.splitlines() or [f"exit {proc.returncode}"])[-1]
        raise unreachable(_registry(ref), last) or ManifestListError(
            f"docker manifest inspect {ref} failed: {last}"
        )
    raw = json.loads(proc.stdout)
    descriptor = raw.get("Descriptor") if isinstance(raw, dict) else None
    if not descriptor:
        raise ManifestListError(f"{ref}: expected one {arch} image, the registry holds a list")
    found = (descriptor.get("platform") or {}).get("architecture", "?")
    if found != arch:
        raise ManifestListError(f"{ref}: expected an {arch} image, the registry holds {found}'s")
    return str(descriptor["digest"])


def check(tag: str, members: dict[str, str], run: Run = subprocess.run) -> None:
    """The registry's list at ``tag`` names exactly ``members`` (arch → digest), each with its
    arch as platform."""
    raw = json.loads(_docker(run, "manifest", "inspect", *_insecure(tag), tag))
    found = {
        (m.get("platform") or {}).get("architecture", "?"): m["digest"]
        for m in raw.get("manifests", [])
    }
    if found != members:
        wrong = sorted(
            f"{arch}: {found.get(arch, 'missing')} (pushed {digest})"
            for arch, digest in members.items()
            if found.get(arch) != digest
        ) + sorted(f"{arch}: not pushed" for arch in found if arch not in members)
        raise ManifestListError(
            f"the registry's list {tag} is not the one pushed: {'; '.join(wrong)}"
        )
