"""Role images: right Slurm, only their packages, no compilers, shared accounts, no secrets."""

from __future__ import annotations

import io
import re

import pytest
from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile

from slurmforge import features
from slurmforge.app import Project
from tests.image.cells import ROLES
from tests.image.helpers import SECRET_FILES, STUB_CONF

DAEMON_VERSION_CMD = {
    "slurmctld": "slurmctld -V",
    "slurmd": "slurmd -V",
    "worker": "slurmd -V",
    "login": "sinfo -V",
    "jail": "sinfo -V",
    # slurmdbd reads its own (stub) configuration before it answers -V
    "slurmdbd": "printf 'DbdHost=localhost\\nStorageType=accounting_storage/mysql\\n' "
    "> /tmp/slurmdbd.conf; chown slurm /tmp/slurmdbd.conf; chmod 600 /tmp/slurmdbd.conf; "
    "SLURM_CONF=/tmp/s.conf slurmdbd -V",
    "slurmrestd": "slurmrestd -V",
}
# Containers in jobs: pyxis where slurmstepd and srun load it, enroot where it runs.
CONTAINERS = {"slurmforge-pyxis", "enroot", "enroot+caps"}
# ssh into the node of one's job (sshd, Slurm's pam_slurm_adopt)
NODE_SSH = {"openssh-server", "slurm-smd-libpam-slurm-adopt"}
OWN_PACKAGES = {
    "slurmctld": {"slurm-smd-slurmctld"},
    "slurmd": {
        "slurm-smd-slurmd",
        "slurm-smd-libpmi0",
        "slurm-smd-libpmi2-0",
        "slurmforge-spank-jail",
        *CONTAINERS,
        *NODE_SSH,
    },
    "worker": {
        "slurm-smd-slurmd",
        "slurm-smd-libpmi0",
        "slurm-smd-libpmi2-0",
        "slurmforge-spank-jail",
        *CONTAINERS,
        *NODE_SSH,
    },
    "login": {"slurm-smd-libnss-slurm", "openssh-server"},
    # the jail: what jobs and users run with (PMI for MPI programs, the plugins for srun's options)
    "jail": {"slurm-smd-libpmi0", "slurm-smd-libpmi2-0", "slurmforge-spank-jail", *CONTAINERS},
    "slurmdbd": {"slurm-smd-slurmdbd"},
    "slurmrestd": {"slurm-smd-slurmrestd"},
}
OTHERS = set().union(*OWN_PACKAGES.values()) - {"openssh-server"}


@pytest.mark.parametrize("role", ROLES)
def test_binaries_report_the_cells_slurm_version(hosts, project: Project, role: str) -> None:
    slurm = project.cells[0].slurm
    host = hosts[role]
    assert host.check_output(f"{STUB_CONF} {DAEMON_VERSION_CMD[role]}") == f"slurm {slurm}"
    for client_cmd in ("sinfo -V", "srun --version", "sbatch --version", "scontrol --version"):
        assert host.check_output(f"{STUB_CONF} {client_cmd}") == f"slurm {slurm}"
    assert host.package("slurm-smd").version.startswith(f"{slurm}-")


@pytest.mark.parametrize("role", ROLES)
def test_only_the_roles_packages(hosts, role: str) -> None:
    host = hosts[role]
    for pkg in OWN_PACKAGES[role]:
        assert host.package(pkg).is_installed, pkg
    for pkg in OTHERS - OWN_PACKAGES[role]:
        assert not host.package(pkg).is_installed, pkg
    for pkg in ("slurm-smd", "slurm-smd-client", "munge"):
        assert host.package(pkg).is_installed, pkg
    assert not host.package("slurm-smd-dev").is_installed


# The jail is where users build their programs (mpicc needs a C compiler); no role image has one.
@pytest.mark.parametrize("role", [*(r for r in ROLES if r != "jail"), "mariadb"])
def test_no_compilers(hosts, role: str) -> None:
    host = hosts[role]
    for tool in ("gcc", "cc", "make", "g++", "ld"):
        assert not host.exists(tool), tool
    for pkg in ("gcc", "make", "build-essential", "binutils"):
        assert not host.package(pkg).is_installed, pkg


@pytest.mark.parametrize("role", ROLES)
def test_munge_is_ready_but_keyless(hosts, role: str) -> None:
    host = hosts[role]
    assert host.exists("munged") and host.exists("munge")
    assert not host.file("/etc/munge/munge.key").exists
    assert host.file("/run/munge").user == "munge"


def test_accounts_are_identical_everywhere(hosts, project: Project) -> None:
    accounts = project.config.versions.accounts
    seen = {}
    for role, host in hosts.items():
        if role not in ROLES:
            continue
        for name in ("slurm", "munge"):
            user = host.user(name)
            seen[(role, name)] = (user.uid, user.gid, host.group(name).gid)
    # the accounts of one image each
    for role, name in (("slurmrestd", "slurmrestd"), ("mariadb", "mysql")):
        user = hosts[role].user(name)
        seen[(role, name)] = (user.uid, user.gid, hosts[role].group(name).gid)
        assert user.shell == "/usr/sbin/nologin", (role, name)
    for (_, name), ids in seen.items():
        want = getattr(accounts, name)
        assert ids == (want.uid, want.gid, want.gid), (name, ids)


def test_slurm_was_compiled_once(hosts) -> None:
    """Every role carries the very same libslurm bytes (one slurm-debs build)."""
    digests = {
        role: hosts[role]
        .check_output("sha256sum $(dpkg -L slurm-smd | grep -m1 'libslurmfull.*\\.so$')")
        .split()[0]
        for role in ROLES
    }
    assert len(set(digests.values())) == 1, digests


def test_login_has_no_baked_ssh_host_keys(hosts) -> None:
    assert hosts["login"].check_output("ls /etc/ssh/ | grep -c ssh_host_ || true") == "0"


@pytest.mark.parametrize("role", [*ROLES, "mariadb"])
def test_no_secret_or_package_cache_in_any_layer(layers, role: str) -> None:
    files = layers[role]
    seen = "usr/sbin/mariadbd" if role == "mariadb" else "usr/sbin/munged"
    assert any(f.endswith(seen) for f in files)  # the scan does see the layers
    names = {*SECRET_FILES, *(f".wh.{n}" for n in SECRET_FILES)}
    leaked = [f for f in files if f.rsplit("/", 1)[-1] in names]
    assert leaked == []
    host_keys = [f for f in files if "/ssh_host_" in f]
    assert host_keys == []
    # apt's downloaded packages and list caches: 80 to 100 MB an image when a layer keeps them
    cached = [f for f in files if f.startswith("var/cache/apt/") and f.endswith((".deb", ".bin"))]
    assert cached == []


@pytest.mark.parametrize("role", [*ROLES, "mariadb"])
def test_labels(client, images, project: Project, role: str) -> None:
    labels = client.images.get(images[role]).labels
    cell = project.cells[0]
    version = labels["org.opencontainers.image.version"]
    if "cuda" in features.carried_by(role):  # built per cell
        assert version == f"{cell.slurm}-cuda{cell.cuda}-{cell.distro}"
    else:  # one image for the cells of every CUDA (mariadb: and of every Slurm), tagged for
        # each of them and labelled with the first one's tag
        repo = images[role].rsplit(":", 1)[0]
        assert f"{repo}:{version}" in client.images.get(images[role]).tags, version
        assert version.endswith(f"-{cell.distro}"), version
        if role != "mariadb":
            assert version.startswith(f"{cell.slurm}-cuda"), version
    assert len(labels["io.slurmforge.inputs-hash"]) == 64
    for key in ("revision", "source", "created"):
        assert labels[f"org.opencontainers.image.{key}"], key
    tags = client.images.get(images[role]).tags
    assert (
        f"{images[role].rsplit(':', 1)[0]}:{cell.slurm_series}-cuda{cell.cuda}-{cell.distro}"
        in tags
    )


SLURM_PLUGINS = "/usr/lib/x86_64-linux-gnu/slurm"
# What accounting and the REST API load, by image: every Slurm series must build them.
ACCOUNTING_PLUGINS = {
    "slurmdbd": ("accounting_storage_mysql.so", "auth_jwt.so"),
    "slurmctld": ("accounting_storage_slurmdbd.so", "auth_jwt.so", "priority_multifactor.so"),
    "slurmrestd": (
        "rest_auth_jwt.so",
        "auth_jwt.so",
        "openapi_slurmctld.so",
        "openapi_slurmdbd.so",
    ),
}


@pytest.mark.parametrize("role", sorted(ACCOUNTING_PLUGINS))
def test_accounting_and_rest_plugins_are_built(hosts, role: str) -> None:
    for plugin in ACCOUNTING_PLUGINS[role]:
        assert hosts[role].file(f"{SLURM_PLUGINS}/{plugin}").exists, plugin


PLUGIN_DIRS = ("/usr/lib/x86_64-linux-gnu/slurm", "/usr/lib/slurmforge/spank")


@pytest.mark.parametrize("role", ROLES)
def test_every_plugin_finds_the_libraries_it_links(hosts, role: str) -> None:
    # what ldd asks the loader, without its shell for each of 95 files: 0.26 s a role where ldd
    # took 1.6
    missing = hosts[role].check_output(
        f"for f in {' '.join(d + '/*.so' for d in PLUGIN_DIRS)}; do"
        ' LD_TRACE_LOADED_OBJECTS=1 /lib64/ld-linux-x86-64.so.2 "$f"'
        ' | sed -n "/not found/s|^|$f: |p"; done'
    )
    assert missing == ""


def _dynamic(elf: ELFFile, tag: str) -> list[str]:
    section = next(s for s in elf.iter_sections() if isinstance(s, DynamicSection))
    found = [t for t in section.iter_tags() if t.entry.d_tag == tag]
    if tag == "DT_NEEDED":
        return [t.needed for t in found]
    return [d for t in found for d in t.runpath.split(":")]


@pytest.mark.parametrize("role", ROLES)
def test_mpi_plugins_find_the_libraries_they_open_at_run_time(hosts, role: str) -> None:
    """mpi/pmix links no PMIx library: it dlopen()s it by name when loaded (by slurmctld, slurmd,
    slurmstepd and srun), through its RUNPATH or the ld cache. ldd cannot see that."""
    host = hosts[role]
    plugins = host.check_output(f"ls {PLUGIN_DIRS[0]}/mpi_*.so").split()
    assert any("mpi_pmix" in p for p in plugins), plugins
    cache = host.check_output("ldconfig -p")
    for plugin in plugins:
        data = host.file(plugin).content
        elf = ELFFile(io.BytesIO(data))
        linked = set(_dynamic(elf, "DT_NEEDED"))
        opened = set(re.findall(rb"\b(lib[A-Za-z0-9_+-]+\.so\.[0-9]+)\b", data)) - {
            n.encode() for n in linked
        }
        for name in sorted(n.decode() for n in opened):
            dirs = _dynamic(elf, "DT_RUNPATH")
            found = f"\t{name} (" in cache or any(host.file(f"{d}/{name}").exists for d in dirs)
            assert found, f"{plugin} opens {name}, which {role} does not have"


def test_the_jail_plugin_exports_only_what_slurm_loads_and_is_hardened(hosts) -> None:
    """slurmstepd loads it as root: full RELRO (BIND_NOW), a non-executable stack, stack
    protection, and nothing exported but SPANK's symbols and the slurm_spank_* callbacks."""
    elf = ELFFile(io.BytesIO(hosts["slurmd"].file(f"{PLUGIN_DIRS[1]}/jail.so").content))
    dynsym = elf.get_section_by_name(".dynsym")
    exported = {
        s.name
        for s in dynsym.iter_symbols()
        if s.entry.st_shndx != "SHN_UNDEF" and s.entry.st_info.bind == "STB_GLOBAL" and s.name
    }
    callbacks = {n for n in exported if n.startswith("slurm_spank_")}
    assert exported - callbacks == {
        "plugin_name",
        "plugin_type",
        "plugin_version",
        "spank_plugin_version",
    }
    assert {"slurm_spank_init", "slurm_spank_task_init_privileged"} <= callbacks
    section = next(s for s in elf.iter_sections() if isinstance(s, DynamicSection))
    flags = {t.entry.d_tag: t.entry.d_val for t in section.iter_tags()}
    assert flags.get("DT_BIND_NOW") is not None or flags.get("DT_FLAGS", 0) & 0x8  # DF_BIND_NOW
    assert any(seg["p_type"] == "PT_GNU_RELRO" for seg in elf.iter_segments())
    stack = next(seg for seg in elf.iter_segments() if seg["p_type"] == "PT_GNU_STACK")
    assert not stack["p_flags"] & 0x1  # not executable
    undefined = {s.name for s in dynsym.iter_symbols() if s.entry.st_shndx == "SHN_UNDEF"}
    assert "__stack_chk_fail" in undefined
