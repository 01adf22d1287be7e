"""The jail image: its overlay (createuser, quickcheck) on every cell, and populate (idempotent,
resumable, upgrade-safe), run for real into Docker volumes on the tier's first cell of each distro
(the entrypoint and rsync are the distro's, whatever the cell's Slurm and CUDA)."""

from __future__ import annotations

import io
import re
import tarfile
import time
import uuid
from collections.abc import Iterator

import docker
import pytest

from slurmforge import jail
from slurmforge.deploy.spec.portal import PortalSpec

# A directory's size is how much its file system allotted to it (a directory that held more
# entries once, as one a killed run left, stays larger); its entries are compared instead.
MANIFEST = r"""cd /jail
find . -path ./.slurmforge -prune -o ! -type d -printf '%p %y %m %U %G %s %l\n' \
  -o -type d -printf '%p %y %m %U %G\n' | sort
find . -path ./.slurmforge -prune -o -type f -print0 | sort -z | xargs -0 md5sum
"""


@pytest.fixture
def volumes(client: docker.DockerClient) -> Iterator[callable]:
    made = []

    def make() -> str:
        name = f"sf-test-jail-{uuid.uuid4().hex[:8]}"
        client.volumes.create(name, labels={"io.slurmforge.test": "jail"})
        made.append(name)
        return name

    yield make
    for name in made:
        client.volumes.get(name).remove(force=True)


def _in_volume(client, image: str, volume: str, script: str) -> str:
    """What ``script`` printed, run with the volume at /jail. Its output is written to a file in
    the container and read back from there once it has exited: the engine's log stream that
    `containers.run` follows can end before the last lines of a large output when the container
    exits under load (a manifest of every file in the jail came back cut short in CI)."""
    container = client.containers.run(
        image,
        entrypoint=["bash", "-c", f"( {script}\n) > /tmp/out"],
        volumes={volume: {"bind": "/jail", "mode": "rw"}},
        detach=True,
    )
    try:
        status = container.wait()["StatusCode"]
        assert status == 0, container.logs().decode(errors="replace")
        stream, _ = container.get_archive("/tmp/out")
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
            member = tar.extractfile("out")
            assert member is not None
            return member.read().decode(errors="replace")
    finally:
        container.remove(force=True)


def _populate(client, ref: str, volume: str, **kw) -> str:
    out = io.StringIO()
    jail.populate(_engine(client), ref, volume, out=out, **kw)
    return out.getvalue()


def _engine(client):
    from slurmforge.engine import Engine

    return Engine(client)


def test_createuser_makes_user_group_home_and_key(hosts) -> None:
    host = hosts["jail"]
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyForTestsOnly0000000000000000000000 t@x"
    out = host.check_output(f"createuser --non-interactive dana --ssh-key '{key}'")
    assert "uid=1000 gid=1000" in out
    assert host.user("dana").uid == 1000 and host.group("dana").gid == 1000
    assert host.file("/home/dana/.bash_aliases").exists  # from the rootfs/ skel
    keys = host.file("/home/dana/.ssh/authorized_keys")
    assert keys.content_string.strip() == key and keys.mode == 0o600 and keys.uid == 1000
    # the next one gets the next free ID; an existing name or a bad one is refused with exit 2
    assert "uid=1001" in host.check_output("createuser --non-interactive erin")
    for bad in ("dana", "Bad-Name", "--ssh-key 'not a key' frank"):
        result = host.run(f"createuser --non-interactive {bad}")
        assert result.rc == 2 and result.stderr.startswith("createuser: "), result.stderr


def test_overlay_and_release_marker(hosts, project) -> None:
    host = hosts["jail"]
    cell = project.cells[0]
    assert host.file("/etc/slurmforge-jail-release").content_string.strip() == (
        f"slurm={cell.slurm} distro={cell.distro}"
    )
    assert host.file("/opt/quickcheck/hello.sh").mode & 0o111
    assert host.file("/etc/profile.d/slurmforge.sh").exists
    assert "shared-root jail" in host.file("/etc/motd").content_string
    assert not host.exists("slurmd") and not host.exists("slurmctld")


@pytest.mark.once_per_distro
def test_populate_is_idempotent(client, images, volumes) -> None:
    volume = volumes()
    first = _populate(client, images["jail"], volume)
    assert "copying the jail image" in first
    before = _in_volume(client, images["jail"], volume, MANIFEST)
    assert "./usr/bin/sbatch" in before and "./etc/slurmforge-jail-release" in before
    # the cluster's host keys, made once by the populate (root's, private), before any node
    for kind in ("rsa", "ecdsa", "ed25519"):
        assert f"./etc/ssh/ssh_host_{kind}_key f 600 0 0 " in before, before
        assert f"./etc/ssh/ssh_host_{kind}_key.pub f 644 0 0 " in before, before
    started = time.monotonic()
    second = _populate(client, images["jail"], volume)
    assert "already holds" in second and "copying" not in second
    assert time.monotonic() - started < 10
    assert _in_volume(client, images["jail"], volume, MANIFEST) == before


@pytest.mark.once_per_distro
def test_the_ld_cache_lives_under_usr_and_a_usr_populate_copies_usr_alone(
    client, images, volumes
) -> None:
    """A jail's arch is all under /usr: /etc/ld.so.cache links to the image's cache kept there,
    and the /usr populate (for nodes of another arch, which mount it over the jail's /usr)
    copies /usr and that cache alone, no user state, no /etc."""
    jail_ref = images["jail"]
    volume, usr = volumes(), volumes()
    _populate(client, jail_ref, volume)
    script = (
        "readlink /jail/etc/ld.so.cache; cmp /etc/ld.so.cache /jail/usr/lib/slurmforge/ld.so.cache"
        " && echo same"
    )
    assert _in_volume(client, jail_ref, volume, script).split() == [
        "../usr/lib/slurmforge/ld.so.cache",
        "same",
    ]
    said = _populate(client, jail_ref, usr, usr_only=True)
    assert "copying the jail image's /usr" in said
    listing = _in_volume(client, jail_ref, usr, "ls -A /jail; cmp /etc/ld.so.cache "
                         "/jail/lib/slurmforge/ld.so.cache && echo same")  # fmt: skip
    names = listing.split()
    assert names[-1] == "same"
    assert {"bin", "lib", "sbin", "share", "local", ".slurmforge"} <= set(names)
    assert not {"etc", "home", "opt", "usr"} & set(names), names
    assert "already holds" in _populate(client, jail_ref, usr, usr_only=True)


@pytest.mark.once_per_distro
def test_a_cluster_without_the_portal_gets_no_jupyterlab_until_it_enables_the_portal(
    client, images, volumes
) -> None:
    """A populate for a cluster whose portal is off leaves the notebook servers' environment
    out of the jail and of another arch's /usr; enabling the portal populates again and brings
    JupyterLab, which runs in the jail; turning it off removes it again."""
    jail_ref, skip = images["jail"], PortalSpec().jail_skip
    volume, usr = volumes(), volumes()
    look = "ls -A /jail/usr/lib/slurmforge /jail/usr/local/bin"

    def jupyter_in_jail() -> bool:
        return "jupyter" in _in_volume(client, jail_ref, volume, look)

    assert "copying the jail image" in _populate(client, jail_ref, volume, skip=skip)
    assert not jupyter_in_jail()
    record = _in_volume(client, jail_ref, volume, "cat /jail/.slurmforge/populated")
    assert record.endswith(f" without {' '.join(skip)}\n"), record
    again = _populate(client, jail_ref, volume, skip=skip)
    # in words, not the record's "<digest> without <paths>" (a plain redeploy printed that)
    assert again.startswith(f"populate: {volume} already holds sha256:"), again
    assert " without " not in again and all(path in again for path in skip), again
    _populate(client, jail_ref, volume)  # the portal enabled
    ran = _in_volume(client, jail_ref, volume, "chroot /jail jupyter-lab --version")
    assert re.fullmatch(r"\d+\.\d+\.\d+\n", ran), ran
    assert "already holds" in _populate(client, jail_ref, volume)
    _populate(client, jail_ref, volume, skip=skip)  # and off again
    assert not jupyter_in_jail()
    _populate(client, jail_ref, usr, usr_only=True, skip=skip)
    listing = _in_volume(client, jail_ref, usr, "ls -A /jail/lib/slurmforge /jail/local/bin")
    assert "ld.so.cache" in listing and "jupyter" not in listing, listing


@pytest.mark.once_per_distro
def test_killed_populate_converges_on_rerun(client, images, volumes) -> None:
    clean, resumed = volumes(), volumes()
    _populate(client, images["jail"], clean)
    info = client.images.get(images["jail"])
    # throttled so that it is surely mid-copy when killed
    container = client.containers.run(
        info.id,
        command=["/jail"],
        environment={
            "SLURMFORGE_JAIL_DIGEST": info.id,
            "SLURMFORGE_JAIL_RSYNC_OPTS": "--bwlimit=20m",
        },
        volumes={resumed: {"bind": "/jail", "mode": "rw"}},
        detach=True,
    )
    try:
        time.sleep(4)
        container.kill()
    finally:
        container.remove(force=True)
    partial = _in_volume(
        client, images["jail"], resumed, "ls -A /jail | wc -l; ls /jail/.slurmforge 2>&-; true"
    )
    assert int(partial.split()[0]) > 0, "nothing was copied before the kill"
    assert "populated" not in partial, "populate finished before it was killed"
    _populate(client, images["jail"], resumed)
    resumed_files = _in_volume(client, images["jail"], resumed, MANIFEST)
    # each populate makes its own cluster's host keys: the same files, not the same bytes
    for kind in ("rsa", "ecdsa", "ed25519"):
        assert f"./etc/ssh/ssh_host_{kind}_key f 600 0 0 " in resumed_files, resumed_files
    assert _without_host_keys(resumed_files) == _without_host_keys(
        _in_volume(client, images["jail"], clean, MANIFEST)
    )


def _without_host_keys(manifest: str) -> list[str]:
    return [line for line in manifest.splitlines() if "/etc/ssh/ssh_host_" not in line]


@pytest.mark.once_per_distro
def test_upgrade_keeps_user_state(client, images, volumes) -> None:
    volume = volumes()
    _populate(client, images["jail"], volume)
    _in_volume(
        client,
        images["jail"],
        volume,
        "chroot /jail createuser --non-interactive gwen"
        " && echo mine > /jail/home/gwen/data && chown 1000:1000 /jail/home/gwen/data"
        " && mkdir -p /jail/opt/user && echo tool > /jail/opt/user/tool"
        " && echo hostkey > /jail/etc/ssh/ssh_host_test_key"
        " && chroot /jail usermod -aG users gwen",
    )
    dockerfile = (
        f"FROM {images['jail']}\n"
        "RUN echo upgraded > /etc/slurmforge-upgrade && rm /usr/bin/less\n"
        "RUN useradd --system --uid 450 newsvc\n"
    )
    tag = f"slurmforge-test/jail-upgrade:{uuid.uuid4().hex[:8]}"
    client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True)
    try:
        out = _populate(client, tag, volume)
        assert "copying the jail image" in out
        check = _in_volume(
            client,
            tag,
            volume,
            "cat /jail/etc/slurmforge-upgrade /jail/home/gwen/data /jail/opt/user/tool"
            " /jail/etc/ssh/ssh_host_test_key; test ! -e /jail/usr/bin/less && echo less-gone;"
            " grep -c '^gwen:' /jail/etc/passwd /jail/etc/shadow /jail/etc/group;"
            " grep '^newsvc:' /jail/etc/passwd | cut -d: -f3; grep '^users:' /jail/etc/group;"
            " stat -c %u /jail/home/gwen/data",
        ).split()
        assert check[:5] == ["upgraded", "mine", "tool", "hostkey", "less-gone"], check
        assert check[5:8] == [
            "/jail/etc/passwd:1",
            "/jail/etc/shadow:1",
            "/jail/etc/group:1",
        ]
        assert check[8] == "450"  # the new image's account arrived
        assert check[9].endswith(":gwen")  # a system group keeps the member added in the jail
        assert check[10] == "1000"  # the home's owner is untouched
    finally:
        client.images.remove(tag, force=True)


@pytest.mark.once_per_distro
def test_populate_refuses_a_volume_that_is_not_a_jail(client, images, volumes) -> None:
    """The entrypoint's own check (what guards the k8s populate Job's claim): a volume with files
    and no .slurmforge/jail is refused, exit 2, and left exactly as it was."""
    volume = volumes()
    checksum = "cd /jail && find . -printf '%p %m %s\\n' | sort | md5sum && md5sum data/precious"
    _in_volume(
        client,
        images["jail"],
        volume,
        "mkdir -p /jail/data && head -c 4096 /dev/urandom > /jail/data/precious",
    )
    before = _in_volume(client, images["jail"], volume, checksum)
    with pytest.raises(jail.ConfigError, match="refused"):
        _populate(client, images["jail"], volume)
    assert _in_volume(client, images["jail"], volume, checksum) == before
