"""Build orchestration against the real daemon: failures are contained, bad input changes nothing.

Each test works on a copy of the project whose images are already built (the `images` fixture),
so only the target a test breaks is attempted; it fails fast and must leave every tag in place.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.common import copy_project
from slurmforge.app import Project, Selection
from tests.build.helpers import build_notes, build_summary, run_build
from tests.common import dump_yaml, load_yaml
from tests.unit.helpers import HOLD


def _tag_ids(client, images: dict[str, str]) -> dict[str, str]:
    return {ref: client.images.get(ref).id for ref in images.values()}


def _break(root: Path, component: str) -> None:
    template = root / "images" / component / "Dockerfile.j2"
    lines = template.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith("FROM ")) + 1
    lines.insert(at, "RUN echo 'slurmforge-test: broken on purpose' && false\n")
    template.write_text("".join(lines))


def _failing_build(tmp_path: Path, images, client, broken: tuple[str, ...], *args: str):
    """Build a copy of the project with ``broken`` components; it must exit 1 and move no tag."""
    root = copy_project(tmp_path)
    for component in broken:
        _break(root, component)
    before = _tag_ids(client, images)
    proc = run_build(root, "--set", "default", *args)
    assert proc.returncode == 1, proc.stderr
    assert _tag_ids(client, images) == before
    return root, proc


def test_failed_target_is_contained(tmp_path: Path, images, client) -> None:
    root, proc = _failing_build(tmp_path, images, client, ("login",))
    # every other image of the cell was built by the fixture and stays as it was
    assert build_summary(root) == {**dict.fromkeys(images, "cached"), "login": "failed"}
    assert "broken on purpose" in proc.stderr  # the log tail is shown
    assert "full log: " in proc.stderr and "login_debian12-24.05.8.log" in proc.stderr
    assert "Traceback" not in proc.stderr  # and the old login image kept its tags (above)


def test_dependents_of_a_failure_are_not_attempted(tmp_path: Path, images, client) -> None:
    root, _ = _failing_build(tmp_path, images, client, ("runtime",))
    status = build_summary(root)
    assert status["runtime"] == "failed"
    blocked = ("slurmctld", "slurmd", "login", "worker", "slurmdbd", "slurmrestd", "exporter")
    assert {status[c] for c in blocked} == {"blocked"}
    assert not list((root / ".cache/logs/latest").glob("slurmd_*.log"))  # never started


def test_checksum_mismatch_builds_and_tags_nothing(tmp_path: Path, images, client) -> None:
    root = copy_project(tmp_path)
    data = load_yaml((root / "versions.yaml").read_text())
    tarball = tmp_path / "slurm-24.05.8.tar.bz2"
    tarball.write_bytes(b"tampered")
    data["slurm"]["24.05.8"]["sources"] = [{"url": tarball.as_uri(), "sha256": "b" * 64}]
    data["sets"]["default"]["registry"] = "badinput.invalid/sf"
    (root / "versions.yaml").write_text(dump_yaml(data, sort_keys=False))
    before = _tag_ids(client, images)
    proc = run_build(root, "--set", "default")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and "checksum mismatch" in proc.stderr
    # nothing built: no target's build reported, no tag made or moved (the daemon's whole list
    # is no measure: the prebuild may be building other cells meanwhile, as in a fresh CI run)
    assert "built " not in proc.stdout + proc.stderr, proc.stdout
    assert _tag_ids(client, images) == before
    assert client.images.list(name="badinput.invalid/sf/*") == []


def test_a_cell_two_sets_share_is_built_once_and_tagged_for_the_second(
    tmp_path: Path, images, client
) -> None:
    """Another set of the same cell, in another registry: its images are the first set's, not
    built again (a fresh CI run rebuilt the ci set's copy of README's cell for 2.3 minutes)."""
    root = copy_project(tmp_path)
    data = load_yaml((root / "versions.yaml").read_text())
    registry, first = "twinset.test/sf", data["sets"]["default"]["registry"]
    data["sets"]["twin"] = {**data["sets"]["default"], "registry": registry}
    (root / "versions.yaml").write_text(dump_yaml(data, sort_keys=False))
    try:
        proc = run_build(root, "--set", "twin", "--component", "exporter", "--component", "login")
        assert proc.returncode == 0, proc.stderr
        rows = json.loads((root / ".cache/logs/latest/summary.json").read_text())
        twins = {r["target"].split("/")[0]: r for r in rows if r["target"].split("/")[0] in (
            "exporter", "login")}  # fmt: skip
        for component, row in twins.items():
            assert row["status"] == "cached", row
            assert row["note"].startswith(f"same inputs as {first}/{component}:"), row
            tag = images[component].rpartition(":")[2]
            ids = {client.images.get(f"{r}/{component}:{tag}").id for r in (registry, first)}
            assert len(ids) == 1, ids
        assert set(twins) == {"exporter", "login"}, rows
    finally:
        for image in client.images.list(name=f"{registry}/*"):
            for tag in image.tags:
                if tag.startswith(registry):
                    client.images.remove(tag, noprune=True)


def test_noop_fast_path_and_what_invalidates_it(tmp_path: Path, images, client) -> None:
    root = copy_project(tmp_path)
    fast = {"unchanged since last build"}
    assert run_build(root).returncode == 0
    assert build_notes(root) != fast  # first build in this copy: the full path decided
    assert run_build(root).returncode == 0
    assert build_notes(root) == fast

    os.utime(root / "images/login/ssh-host-keys.sh")  # stat changed, content did not
    assert run_build(root).returncode == 0
    assert build_notes(root) != fast
    assert run_build(root).returncode == 0
    assert build_notes(root) == fast

    (login,) = [
        t for t in Project(Selection(root / "versions.yaml")).targets if t.component == "login"
    ]
    moved = login.tags[1]  # the floating tag, e.g. login:24.11-cuda12.2.2-debian12
    client.images.get(images["slurmd"]).tag(moved)  # someone moved a tag behind our back
    assert run_build(root).returncode == 0
    assert build_notes(root) != fast
    assert client.images.get(moved).id == client.images.get(images["login"]).id  # repaired


def test_a_build_that_only_tags_does_not_wait_for_a_build_in_progress(
    tmp_path: Path, images, client
) -> None:
    """A copy of the checkout whose images exist (CI's copies share the checkout's build lock,
    which its prebuild holds for most of a run) tags them at once; only one that has an image
    to build waits its turn."""
    root = copy_project(tmp_path / "copy")
    (root / ".cache/build.lock").touch()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(root)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "holding"
        proc = run_build(root, "--set", "default")
        assert proc.returncode == 0, proc.stderr
        assert "waiting for" not in proc.stderr
        assert set(build_summary(root).values()) == {"cached"}
        _break(root, "exporter")
        waiting = subprocess.Popen(
            [sys.executable, "-m", "invoke", "--search-root", str(root), "build", "--set",
             "default", "--component", "exporter"],
            cwd=root, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            said = ""
            for line in waiting.stderr:  # it says so, then waits
                said += line
                if "build: waiting for invoke build" in line:
                    break
            else:
                raise AssertionError(f"the build did not wait its turn: {said}")
        finally:
            waiting.kill()
            waiting.wait()
    finally:
        holder.kill()
        holder.wait()


def test_fail_fast_stops_at_the_first_failure(tmp_path: Path, images, client) -> None:
    root, _ = _failing_build(
        tmp_path, images, client, ("slurmctld", "login"), "--fail-fast", "--jobs", "1"
    )
    status = build_summary(root)
    roles = [status[c] for c in ("slurmctld", "slurmd", "login")]
    assert roles.count("failed") == 1 and roles.count("cancelled") == 2, status
