"""Inputs a careful (or careless) user gives, through the real command line: each refused with one
`error:` line naming the file or option, the key and what was expected, exit status 2, no
traceback, and nothing written, deleted or leaked."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from slurmforge import jail, refs, versions
from slurmforge.errors import ConfigError, SourceError
from tests.common import ROOT, load_yaml
from tests.unit.helpers import INVOKE, assert_clean_failure, shipped_with
from tests.unit.inproc import run_cli


def _tree_digest(root: Path) -> str:
    """Names, modes and contents of everything under ``root``."""
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        digest.update(f"{path.relative_to(root)} {path.lstat().st_mode}".encode())
        if path.is_file():
            digest.update(path.read_bytes())
    return digest.hexdigest()


# -- populate never writes into what is not a jail ------------------------------------------------


def test_populate_refuses_a_directory_with_content_and_leaves_it_untouched(tmp_path: Path) -> None:
    target = tmp_path / "data"
    (target / "sub").mkdir(parents=True)
    (target / "keep.txt").write_text("precious\n")
    (target / "sub" / "more").write_bytes(os.urandom(256))
    before = _tree_digest(target)
    proc = run_cli("jail-populate", "--into", str(target))
    assert_clean_failure(proc, f"{target} holds files but no .slurmforge/jail")
    assert _tree_digest(target) == before


@pytest.mark.parametrize(
    ("into", "expected"),
    [
        ("../" * 12 + "etc", "/etc is a system directory"),  # resolved before deciding
        ("/", "/ is a system directory"),
        ("/usr", "/usr is a system directory"),
        ("/var/lib", "/var/lib is a system directory"),
        ("bad/name", "expected a directory (/…, ./…, ~/…) or a Docker volume name"),
        ("-rf", "expected a directory (/…, ./…, ~/…) or a Docker volume name"),
    ],
)
def test_populate_refuses_what_cannot_be_a_jail(into: str, expected: str) -> None:
    assert_clean_failure(run_cli("jail-populate", "--into", into), expected)


def test_populate_refuses_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert_clean_failure(
        run_cli("jail-populate", "--into", str(tmp_path / "f")), "exists and is not a directory"
    )


def test_a_jail_is_an_empty_or_marked_directory(tmp_path: Path) -> None:
    assert jail.check_into(str(tmp_path / "new")) == str(tmp_path / "new")  # made by populate
    (tmp_path / "fresh" / "lost+found").mkdir(parents=True)
    assert jail.check_into(str(tmp_path / "fresh"))
    marked = tmp_path / "marked"
    (marked / ".slurmforge").mkdir(parents=True)
    (marked / "usr").mkdir()
    with pytest.raises(ConfigError, match=r"no \.slurmforge/jail"):
        jail.check_into(str(marked))
    (marked / jail.MARKER).write_text("")  # what populate writes before its first copy
    assert jail.check_into(str(marked)) == str(marked)
    assert jail.check_into("my_jail.1") == "my_jail.1"  # a volume name


# -- names that reach a command line --------------------------------------------------------------


@pytest.mark.parametrize("user", ["-c id", "--login", "Alice", "a b", "x" * 40, ""])
def test_login_refuses_a_user_name_that_is_not_one(user: str) -> None:
    assert_clean_failure(run_cli("login", "--user", user), "--user")


def test_cluster_and_node_set_names_are_dns_labels(write_cluster) -> None:
    path = write_cluster(shipped_with(name="My_Cluster"))
    assert_clean_failure(run_cli("deploy", "--cluster", str(path)), f"{path}: name: expected")
    nodesets = [{"name": "-cpu", "definitions": ["cpu-small"], "replicas": 1}]
    path = write_cluster(shipped_with(nodesets=nodesets))
    assert_clean_failure(run_cli("deploy", "--cluster", str(path)), "nodesets[0].name: expected")
    # not even a string (the fuzz test found this one: a list where a name goes)
    nodesets = [{"name": ["cpu"], "definitions": ["cpu-small"], "replicas": 1}]
    path = write_cluster(shipped_with(nodesets=nodesets))
    assert_clean_failure(run_cli("deploy", "--cluster", str(path)), "nodesets[0].name: ")


@pytest.mark.parametrize(
    ("accounting", "expected"),
    [
        ({"enforce": ["associations", "limitz"]}, "accounting.enforce[1]: "),
        ({"default_account": "Big Lab"}, "accounting.default_account: "),
        (
            {"database": {"host": "db.example.org", "password_secret": "/nonexistent/pw"}},
            "accounting.database.password_secret: no file /nonexistent/pw",
        ),
        (
            {"database": {"host": "db server", "password_secret": "/etc/hostname"}},
            "accounting.database.host: expected a host name or IP address",
        ),
        (
            {"database": {"host": "db", "password_secret": "pw.txt"}},
            "accounting.database.password_secret: expected an absolute path (starting with /",
        ),
    ],
)
def test_bad_accounting_settings_are_refused_before_docker(
    write_cluster, accounting: dict, expected: str
) -> None:
    path = write_cluster(shipped_with(accounting=accounting))
    proc = run_cli("deploy", "--cluster", str(path))  # run_cli points at no daemon
    assert_clean_failure(proc, f"{path}: {expected}")


def test_rest_needs_accounting_and_a_port_of_its_own(write_cluster) -> None:
    path = write_cluster(shipped_with(accounting={"enabled": False}))
    assert_clean_failure(run_cli("deploy", "--cluster", str(path)), "rest.enabled: ")
    path = write_cluster(shipped_with(rest={"port": 2222}))
    assert_clean_failure(run_cli("deploy", "--cluster", str(path)), "rest.port: 2222 is login")


def test_an_external_database_port_that_is_no_mysql_server_is_named(tmp_path) -> None:
    """Something else listens there (here a line-based server): the login cannot complete,
    which is said without a traceback (tests/cluster: a real server refusing the password)."""
    from slurmforge.deploy.slurm import database as accounting_db
    from slurmforge.deploy.spec.services import DatabaseSpec

    password = tmp_path / "pw"
    password.write_text("a-password-of-the-site-0123")
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]

        def answer() -> None:
            for _ in range(2):  # check_reachable's connection, then the login's
                conn, _ = server.accept()
                with conn, contextlib.suppress(OSError):  # the first one is gone already
                    conn.sendall(b"SSH-2.0-OpenSSH_9.2\r\n")
                    conn.shutdown(socket.SHUT_RDWR)

        thread = threading.Thread(target=answer)
        thread.start()
        db = DatabaseSpec(host="127.0.0.1", port=port, password_secret=str(password))
        with pytest.raises(ConfigError) as exc:
            accounting_db.check_external(tmp_path / "cluster.yaml", db)
        thread.join()
    assert exc.value.message.startswith(
        f"{tmp_path / 'cluster.yaml'}: accounting.database.host: 127.0.0.1:{port} did not "
        "complete a MySQL login ("
    )
    assert "MySQL or MariaDB" in (exc.value.hint or "")


# -- credentials never in a URL, never printed ----------------------------------------------------


def test_credentials_in_a_source_url_are_refused_and_not_printed(write_config, shipped) -> None:
    url = "https://alice:s3cr3t-token@example.org/slurm.tar.gz"
    shipped["slurm"]["24.11.5"]["sources"][0]["url"] = url
    proc = run_cli("matrix", "--config", str(write_config(shipped)))
    assert_clean_failure(proc, 'slurm."24.11.5".sources[0].url: expected a URL without credentials')
    assert "s3cr3t" not in proc.stderr + proc.stdout


def test_credentials_in_the_mirror_are_refused_and_not_printed() -> None:
    proc = run_cli("fetch", env={"SLURMFORGE_MIRROR": "https://bob:hunter2@mirror.example/"})
    assert_clean_failure(proc, "$SLURMFORGE_MIRROR: expected a URL without credentials")
    assert "hunter2" not in proc.stderr
    assert "hint: keep credentials out of URLs: ~/.netrc" in proc.stderr


def test_redact_hides_every_credential_in_a_message() -> None:
    text = "https://u:t0k@h/x: HTTP 401; then git://me@h2/y.git failed; ssh://git@h3/z"
    assert (
        refs.redact(text)
        == "https://***@h/x: HTTP 401; then git://***@h2/y.git failed; ssh://***@h3/z"
    )


# -- references, addresses, schedules, URLs: by their grammars ------------------------------------


@pytest.mark.parametrize(
    ("template", "why"),
    [
        ("", "invalid image reference"),
        ("{slurm} x", "invalid image reference"),
        ("a/{slurm}", "invalid image reference"),
        ("{slurm}:x", "invalid image reference"),
        ("-{slurm}", "invalid image reference"),
    ],
)
def test_tag_templates_must_make_image_references(write_config, shipped, template, why) -> None:
    shipped["sets"]["default"]["tags"] = [template]
    proc = run_cli("matrix", "--config", str(write_config(shipped)))
    assert_clean_failure(proc, "sets.default.tags[0]: ")
    assert why in proc.stderr


@pytest.mark.parametrize(
    "registry", ["https://ghcr.io/acme", "reg.example//x", "a b", "/x", "reg.example/x:tag"]
)
def test_registries_must_be_registry_prefixes(write_config, shipped, registry) -> None:
    shipped["sets"]["default"]["registry"] = registry
    proc = run_cli("matrix", "--config", str(write_config(shipped)))
    assert_clean_failure(proc, "sets.default.registry: expected a registry")


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"login": {"address": "999.999.999.999"}}, "login.address: expected an IP address"),
        ({"kubernetes": {"registry": "https://ghcr.io/acme"}}, "kubernetes.registry: expected a"),
        ({"kubernetes": {"health_check": {"schedule": "x y z w v"}}}, "expected a cron schedule"),
        ({"kubernetes": {"health_check": {"schedule": "@every"}}}, "expected a cron schedule"),
        (
            {"kubernetes": {"health_check": {"schedule": "0 0 */4 * * *"}}},
            "kubernetes.health_check.schedule: expected a cron schedule of 5 fields",
        ),
    ],
)
def test_cluster_values_by_their_grammars(write_cluster, changes, expected) -> None:
    path = write_cluster(shipped_with(**changes))
    assert_clean_failure(run_cli("deploy", "--cluster", str(path)), expected)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("file://relative/x.tar.gz", "expected file:///absolute/path"),
        ("https:///x.tar.gz", "expected a URL with a host"),
        ("https://h:99999/x.tar.gz", "expected a URL"),
        ("ftp://h/x.tar.gz", "expected a URL starting with http://"),
    ],
)
def test_source_urls_need_a_scheme_and_a_host(write_config, shipped, url, expected) -> None:
    shipped["slurm"]["24.11.5"]["sources"][0]["url"] = url
    proc = run_cli("matrix", "--config", str(write_config(shipped)))
    assert_clean_failure(proc, f'slurm."24.11.5".sources[0].url: {expected}')


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("0 0 */4 * * *", "5 fields, e.g. '0 */6 * * *' (Kubernetes has no seconds field), got 6"),
        ("0 0 L * *", "its day of month 'L' is not a number from 1 to 31"),
        ("0 0 15W * *", "its day of month '15W' is not a number"),
        ("0 0 * * MON#2", "its day of week 'MON#2' is not a number from 0 to 6 or a name"),
        ("0 0 * * 7", "its day of week '7' is outside 0-6"),
        ("60 * * * *", "its minute '60' is outside 0-59"),
        ("0 5-2 * * *", "its hour '5-2' has a range that runs backwards"),
        ("*/0 * * * *", "needs a step of 1 or more"),
        ("0 0 1 JAN-MAR-MAY *", "has more than one '-'"),
        ("TZ=UTC 0 * * * *", "without a time zone"),
        ("@every", "5 fields"),
        ("@every soon", "expected '@every' and a duration"),
    ],
)
def test_cron_schedules_a_cronjob_refuses(schedule, expected) -> None:
    with pytest.raises(ValueError, match=re.escape(expected)):
        refs.cron(schedule)


def test_good_values_pass_their_grammars() -> None:
    for schedule in (
        "*/5 * * * MON-FRI",
        "@hourly",
        "0 ? * jan,Jun sun",
        "5/10 1-3,7 * * *",
        "@every 1h30m",
        "0 0 31 2 *",
    ):
        assert refs.cron(schedule) == schedule
    assert refs.ip_address("::1") == "::1"
    assert refs.registry_prefix("localhost:5000/a/b")
    assert refs.image_ref("debian:12") and refs.image_ref(f"x/y@sha256:{'a' * 64}")
    assert refs.url("file:///srv/mirror/x.tar.gz", ("file",))


# -- the loader: strict, bounded ------------------------------------------------------------------


def test_a_file_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "versions.yaml"
    path.write_bytes(b"sets:\n  caf\xe9: {}\n")
    assert_clean_failure(run_cli("matrix", "--config", str(path)), f"{path}: byte 11: not UTF-8")


def test_a_key_that_is_a_list(tmp_path: Path) -> None:
    path = tmp_path / "versions.yaml"
    path.write_text("? [a, b]\n: 1\n")
    assert_clean_failure(run_cli("matrix", "--config", str(path)), "a key must be a plain value")


def test_an_alias_bomb_is_refused_at_once(tmp_path: Path) -> None:
    lines = ["a: &a [x, x, x, x, x, x, x, x, x]"]
    for prev, name in zip("abcdefghi", "bcdefghij", strict=True):
        lines.append(f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]")
    path = tmp_path / "versions.yaml"
    path.write_text("\n".join(lines) + "\n")
    assert path.stat().st_size < 3000
    start = time.monotonic()
    proc = run_cli("matrix", "--config", str(path))
    assert_clean_failure(proc, "aliases expand this document past")
    assert time.monotonic() - start < 5


def test_a_huge_file_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    path = tmp_path / "versions.yaml"
    path.write_text("x: " + "a" * (20 << 20) + "\n")
    start = time.monotonic()
    assert_clean_failure(run_cli("matrix", "--config", str(path)), "larger than 1024 KiB")
    assert time.monotonic() - start < 2


def test_a_long_value_is_quoted_short(write_config, shipped) -> None:
    shipped["slurm"]["24.11.5"]["sources"][0]["sha256"] = "z" * 5000
    proc = run_cli("matrix", "--config", str(write_config(shipped)))
    assert_clean_failure(proc, "sha256: expected 64 lowercase hex digits")
    assert len(proc.stderr.splitlines()[0]) < 300


# -- options: typed, and unknown ones exit 2 ------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["build", "--jobs", "abc"], "--jobs 'abc': expected an integer > 0"),
        (["build", "--jobs", "0"], "--jobs '0': expected an integer > 0"),
        (["push", "--retries", "x"], "--retries 'x': expected an integer >= 0"),
        (["gpu-check", "--min-busbw", "fast"], "--min-busbw 'fast': expected a number >= 0"),
        (["deploy", "--timeout", "nan"], "--timeout 'nan': expected a number > 0"),
        (["build", "--no-such-option"], "No idea what '--no-such-option' is"),
        (["no-such-task"], "No idea what 'no-such-task' is"),
        (["push", "--registry", "https://ghcr.io/x"], "--registry: expected a registry"),
    ],
)
def test_options_are_typed_and_unknown_ones_exit_2(args: list[str], expected: str) -> None:
    assert_clean_failure(run_cli(*args), expected)


def test_out_must_be_a_directory(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    for args in (["deploy"], ["deploy", "--target", "k8s", "--dry-run"], ["render"]):
        proc = run_cli(*args, "--out", str(tmp_path / "file" / "sub"))
        assert_clean_failure(proc, f"{tmp_path / 'file'} is not a directory")


# -- nothing stored on refusal --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("cpu=99999", "replicas: Input should be less than or equal to 65536"),
        ("gpu=1", "unknown node set 'gpu'"),
        ("cpu=3", ""),  # good, but the cluster was never deployed (here: no Docker either)
    ],
)
def test_scale_refused_stores_no_count(write_cluster, tmp_path, spec, expected) -> None:
    path = write_cluster(shipped_with(name="never"))
    state = tmp_path / "state"
    proc = run_cli("scale", spec, "--cluster", str(path), env={"SLURMFORGE_STATE_DIR": str(state)})
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr
    assert not (state / "never" / "replicas.json").exists()


# -- the right file is blamed ---------------------------------------------------------------------


def test_a_typo_in_a_layer_file_names_the_layer_file(write_cluster, tmp_path) -> None:
    path = write_cluster(shipped_with())
    layer = tmp_path / "layers" / "cpu-small.yaml"
    layer.write_text(layer.read_text() + "cpuss: 2\n")
    proc = run_cli("deploy", "--cluster", str(path))
    assert_clean_failure(proc, f"{layer}: cpuss: unknown key")
    layer.write_text("cpus: many\n")
    assert_clean_failure(run_cli("deploy", "--cluster", str(path)), f"{layer}: cpus: input should")


def test_a_gpu_node_set_in_no_partition(write_cluster) -> None:
    nodesets = [
        {"name": "cpu", "definitions": ["cpu-small"], "replicas": 1},
        {"name": "a100", "definitions": ["gpu"], "replicas": 1, "gres": ["gpu:a100:1"]},
    ]
    path = write_cluster(shipped_with(nodesets=nodesets))
    proc = run_cli("deploy", "--target", "k8s", "--dry-run", "--cluster", str(path))
    assert_clean_failure(proc, "nodesets[1]: GPU node set 'a100' is in no partition")


def test_shipped_files_still_pass() -> None:
    assert run_cli("matrix").returncode == 0
    data = load_yaml((ROOT / "deploy" / "cluster.yaml").read_text())
    assert data["name"]


def test_a_failed_fetch_leaves_no_directory_it_made(tmp_path: Path) -> None:
    from slurmforge import pins, sources

    cfg = versions.load(ROOT / "versions.yaml")
    cache = sources.Cache(tmp_path / "new" / "cache")
    missing = pins.Source(url=(tmp_path / "nowhere.tar.gz").as_uri(), sha256="a" * 64)
    with pytest.raises(SourceError, match=r"nowhere\.tar\.gz"):
        cache.fetch(cfg, [missing])
    assert not (tmp_path / "new").exists()


def test_forgetting_state_deletes_only_state_files(tmp_path: Path, monkeypatch) -> None:
    from slurmforge import state

    monkeypatch.setenv("SLURMFORGE_STATE_DIR", str(tmp_path))
    state.write_scale("etc", {"cpu": 3})
    (tmp_path / "etc" / "passwd").write_text("root:x:0:0::/root:/bin/bash\n")  # not ours
    state.forget_cluster("etc")
    assert not (tmp_path / "etc" / "replicas.json").exists()
    assert (tmp_path / "etc" / "passwd").read_text().startswith("root:")
    state.write_scale("mine", {"cpu": 1})
    state.forget_cluster("mine")
    assert not (tmp_path / "mine").exists()


def test_a_relative_state_dir_is_refused(write_cluster) -> None:
    path = write_cluster(shipped_with())
    proc = run_cli("scale", "cpu=3", "--cluster", str(path), env={"SLURMFORGE_STATE_DIR": "st"})
    assert_clean_failure(proc, "$SLURMFORGE_STATE_DIR 'st': expected an absolute path")


def test_rendering_k8s_again_keeps_files_it_did_not_write(tmp_path: Path) -> None:
    from slurmforge.deploy.k8s import kustomize

    out = tmp_path / "k8s"
    obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "a"}}
    kustomize.write(out, {"namespace.yaml": obj, "old.yaml": obj}, "a", "cluster.yaml")
    (out / "notes.txt").write_text("mine\n")
    kustomize.write(out, {"namespace.yaml": obj}, "a", "cluster.yaml")
    assert not (out / "old.yaml").exists()  # an earlier render's, gone
    assert (out / "notes.txt").read_text() == "mine\n"


def test_the_entry_point_itself_exits_2_with_one_line() -> None:
    """The same through a fresh `python -m invoke` process, as a user runs it."""
    proc = subprocess.run(
        [*INVOKE, "build", "--jobs", "many"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert_clean_failure(proc, "--jobs 'many': expected an integer > 0")
    proc = subprocess.run([*INVOKE, "bulid"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert_clean_failure(proc, "No idea what 'bulid' is")
