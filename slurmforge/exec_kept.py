"""A command run in a container through the engine's exec API, whose output survives the
engine losing it (``exec_kept``)."""

from __future__ import annotations

import io
import tarfile
import uuid
from typing import Any

_EXEC_KEPT = "slurmforge-exec-"  # in a container's /run: a command's output and status
_EXEC_END = "--slurmforge-exec-end:"


def exec_kept(container: Any, argv: list[str]) -> tuple[int, str]:
    """``argv`` run in ``container`` (the SDK's): its exit status and output (stdout and stderr).

    Docker 20.10 loses an exec's output now and then on a loaded machine: fresh CI runs met an
    `echo`, an `sbatch --parsable` and the `scontrol version` a deploy's backup asks (which then
    took the controller for one that does not answer) exit 0 and come back empty. The output and
    the status also go to files in the container's /run, read back through the archive API (no
    exec) when the stream lacks its last line; readable by the user who ran it alone, they go
    at the next call 20 minutes on."""
    import docker.errors

    kept = f"/run/{_EXEC_KEPT}{uuid.uuid4().hex}"
    script = (  # the files made first, in a subshell: the command keeps the exec's umask, and a
        # user who cannot write /run gets the stream alone (in dash a failed redirection of a
        # special builtin would end the shell)
        f"find /run -maxdepth 1 -name '{_EXEC_KEPT}*' -mmin +20 -delete 2> /dev/null; "
        f"if (umask 077 && : > {kept} && : > {kept}.code) 2> /dev/null; then "
        f'"$@" > {kept} 2>&1; code=$?; echo $code > {kept}.code; cat {kept}; '
        f'else "$@" 2>&1; code=$?; fi; echo; echo {_EXEC_END}$code'
    )
    ran, raw = container.exec_run(["sh", "-c", script, "sh", *argv])
    text = raw.decode(errors="replace")
    out, end, code = text.rpartition(_EXEC_END)
    if end:
        return int(code), out.removesuffix("\n")
    try:
        return int(_read(container, f"{kept}.code")), _read(container, kept)
    except docker.errors.NotFound:  # it never ran (a stopped container): Docker's answer
        return ran, text


def _read(container: Any, path: str) -> str:
    """A file in a container, through the archive API."""
    stream, _ = container.get_archive(path)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        member = tar.extractfile(tar.getmembers()[0])
        return member.read().decode(errors="replace") if member else ""
