"""slurmforge tasks: which options each command takes and what it prints; the options are
declared in slurmforge/cli.py and the work happens in the package."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

from invoke import Exit

from slurmforge import cli
from slurmforge.cli import FETCH, REQUIRED, SELECT, TARGET, Option, Select, task
from slurmforge.options import number, out_dir, parse_tasks_our_way
from slurmforge.summary import SKIPPED_HINT, print_summary, table

parse_tasks_our_way()
# The checkout is where this file is (a copy's, for the build tier and the benchmarks), not where
# the package was installed from.
cli.ROOT = ROOT = Path(__file__).resolve().parent


def _print_skipped(skipped: dict[str, str], hint: bool = True) -> None:
    """Why each optional feature was skipped (a build's summary gives the hint itself)."""
    for feature, why in sorted(skipped.items()):
        print(f"skipped {feature}: {why}", file=sys.stderr)
    if skipped and hint:
        print(SKIPPED_HINT, file=sys.stderr)


def _print_plan(project) -> None:
    rows = [[d.target.id, str(d.action), d.reason, d.target.ref] for d in project.plan()]
    print(table(rows, ["target", "action", "why", "image"]))


# -- build side ----------------------------------------------------------------------------------


@task(
    SELECT,
    FETCH,
    jobs=Option("targets built concurrently (default 2)"),
    dry_run=Option("show what would be built and why, build nothing", False),
    fail_fast=Option("stop at the first failure (running builds are cancelled)", False),
)
def build(c, select: Select, fetch, jobs, dry_run, fail_fast):
    """Build the images of a matrix set; unchanged targets are reused without calling docker."""
    jobs = number("--jobs", jobs, 2, integer=True)
    if dry_run:
        _print_plan(select.project())
        return
    from slurmforge import buildcmd

    outcome = buildcmd.build(select, fetch, jobs, fail_fast)
    print_summary(outcome.rows)
    _print_skipped(outcome.skipped, hint=False)
    outcome.check()


@task(SELECT)
def plan(c, select: Select):
    """Show what `build` would do for each target and why (which input changed)."""
    _print_plan(select.project())


@task(SELECT, FETCH)
def fetch(c, select: Select, fetch):
    """Download and verify the upstream sources of the selected cells into .cache/sources."""
    project = select.project()
    optional, skipped = project.fetch_optional(fetch)
    for f in project.fetch(fetch) + optional:
        print(f"{f.sha256}  {f.path}")
    _print_skipped(skipped)


@task(SELECT, FETCH.only("mirror", "trust"))
def lock(c, select: Select, fetch):
    """Record sha256 of unpinned sources fetched from a trusted origin into versions.lock."""
    fetched, skipped, path = select.project().lock(fetch)
    for f in fetched:
        print(f"{f.sha256}  {f.source.url}")
    _print_skipped(skipped)
    print(f"recorded in {path}", file=sys.stderr)


@task(
    SELECT.only("set", "config"),
    format=Option("table, json, or github (one-line JSON for a GitHub Actions matrix)", "table"),
)
def matrix(c, select: Select, format):
    """List the cells of a matrix set and the image each component gets."""
    from slurmforge.app import matrix_rows

    rows = matrix_rows(select.project())
    if format == "json":
        print(json.dumps(rows, indent=2))
    elif format == "github":
        print(json.dumps({"include": rows}, separators=(",", ":")))
    elif format == "table":
        keys = list(rows[0]) if rows else ["cell"]
        print(table([[r[k] for k in keys] for r in rows], keys))
    else:
        from slurmforge.errors import ConfigError

        raise ConfigError(f"--format {format!r}: expected table, json or github")


@task(SELECT, out=Option("directory to write into", REQUIRED))
def render(c, select: Select, out):
    """Write the rendered Dockerfiles of the selected targets under OUT for review."""
    where = out_dir("--out", out, ROOT)
    for path in select.project().render(where):
        print(path)


@task(
    SELECT,
    images=Option("also remove the selected set's images (all their tags)", False),
    sources=Option("also empty the source cache (.cache/sources)", False),
)
def clean(c, select: Select, images, sources):
    """Remove logs and temporary files; optionally images and cached sources."""
    for item in select.project().clean(images, sources):
        print(f"removed {item}")


@task(
    SELECT,
    registry=Option("push to this registry prefix instead of the set's (HOST[:PORT][/PATH])"),
    force=Option("push even images whose image tests have not passed", False),
    retries=Option("retries of a transient failure per tag, with backoff (default 4)"),
    lists=Option(
        "only join the per-arch images each cell's push left in the registry into manifest lists",
        False,
    ),
)
def push(c, select: Select, registry, force, retries, lists):
    """Push every tag of the selected built, tested images; record their digests in build/."""
    from slurmforge import push as push_mod

    retries = number("--retries", retries, 4, integer=True, inclusive=True)
    if registry:
        push_mod.check_registry(registry)  # refused before Docker is asked anything
    if lists:
        pushed, lock = push_mod.push_lists(select.project(), registry)
    else:
        pushed, lock = push_mod.push(select.project(), registry, force, retries)
    print(table(push_mod.summary(pushed), ["image", "digest", "sent", "existed", "tries", "time"]))
    print(f"digests recorded in {lock}", file=sys.stderr)


@task(SELECT.only("set", "cell", "config"))
def test_images(c, select: Select):
    """Build (if needed) and run the image tests on a set's images; a pass is recorded for push."""
    if select.project().run_tests("image"):
        raise Exit("error: the image tests failed; nothing was recorded as tested", code=1)


@task(
    SELECT.only(
        "set",
        "cell",
        "config",
        cell=Option(
            "the cell whose images the cluster runs (needed when the set has several)",
            iterable=True,
        ),
    )
)
def test_cluster(c, select: Select):
    """Build (if needed) and run the cluster tests (tests/cluster) on one cell's images."""
    if select.project().run_tests("cluster"):
        raise Exit("error: the cluster tests failed", code=1)


@task(
    SELECT.only(
        "set",
        "cell",
        "config",
        cell=Option("the cell whose jail image to use (default: the set's only cell)"),
    ),
    into=Option("a directory (absolute or ./relative) or a Docker volume name", REQUIRED),
    keep=Option("extra path kept as user state (repeatable)", iterable=True),
)
def jail_populate(c, select: Select, into, keep):
    """Copy the jail image's filesystem into a directory or volume (idempotent, resumable)."""
    from slurmforge import jail

    jail.check_into(into)  # refused before Docker is asked anything
    project = dataclasses.replace(select, components=("jail",)).project()
    jail.populate(project.engine, project.jail_ref, into, keep or ())


# -- deploy side ---------------------------------------------------------------------------------


def _open(where):
    from slurmforge.deploy.commands import open_target

    return open_target(where)


@task(
    TARGET.only("target", "cluster", "config", "out", "context", "namespace", "dry_run"),
    timeout=Option("seconds to wait for every node (default 180; k8s: per wait, default 600)"),
    no_backup=Option("take no backup before a Slurm series change", False),
)
def deploy(c, where, timeout, no_backup):
    """Generate the manifests, populate the jail, start the cluster and wait for its nodes."""
    from slurmforge.deploy.commands import deploy as deploy_cluster

    for line in deploy_cluster(where, timeout, back_up=not no_backup):
        print(line)


@task(
    TARGET.only("target", "cluster", "config", "context", "namespace"),
    out=Option("directory the archive is written to (default: beside the cluster's secrets)"),
    from_schedule=Option(
        "k8s: copy the newest archive kubernetes.backup.schedule kept, instead of taking one",
        False,
    ),
)
def backup(c, where, out, from_schedule):
    """Write one verifiable archive of the running cluster: database, StateSave, secrets, jail."""
    directory = out_dir("--out", out, Path.cwd()) if out else None
    for line in _open(where).backup(directory, from_schedule):
        print(line)


@task(
    TARGET.only("target", "cluster", "config", "out", "context", "namespace"),
    archive=Option("the archive `invoke backup` wrote", REQUIRED),
    force=Option("delete the cluster's containers, volumes and secrets here first", False),
    timeout=Option("seconds to wait for every node (default 180)"),
)
def restore(c, where, archive, force, timeout):
    """Bring a cluster back from its archive, on this host: every record, job, user and file."""
    from slurmforge.deploy.commands import restore as restore_cluster

    for line in restore_cluster(where, Path(archive).resolve(), force, timeout):
        print(line)


@task(TARGET)
def status(c, where):
    """Containers of the cluster and what Slurm says about its nodes and jobs."""
    print(_open(where).status())


@task(
    TARGET,
    volumes=Option(
        "also delete the jail, the controller state, the accounting database and the secrets",
        False,
    ),
)
def down(c, where, volumes):
    """Stop and remove the cluster's containers (and with --volumes, its data)."""
    _open(where).down(volumes)


@task(
    TARGET,
    spec=Option("NODESET=N, e.g. cpu=3", REQUIRED),
    timeout=Option("seconds to wait for draining and for new nodes (default 180; k8s: 600)"),
)
def scale(c, where, spec, timeout):
    """Change a node set's node count: removed nodes are drained first, new ones join idle."""
    from slurmforge.deploy.commands import scale as scale_nodes

    removed = scale_nodes(where, spec, timeout)
    print(f"scaled: {spec}" + (f" (removed {', '.join(removed)})" if removed else ""))


@task(TARGET, user=Option("log in as this jail user instead of root"))
def login(c, where, user):
    """Open a shell inside the jail on the login node."""
    if user is not None:
        from slurmforge.deploy.spec.model import check_user

        check_user(user)  # refused before the cluster is asked anything
    argv = _open(where).login_argv(user)
    os.execvp(argv[0], argv)


@task(
    TARGET,
    min_busbw=Option("drain nodes below this bus bandwidth, GB/s (default: gpu.min_busbw)"),
    command=Option("run this instead of all_reduce_perf on each node (wrappers, tests)"),
)
def gpu_check(c, where, min_busbw, command):
    """Run the GPU health check once on every GPU node: drain slow ones, resume recovered ones."""
    threshold = number("--min-busbw", min_busbw, inclusive=True)
    results = _open(where).gpu_check(threshold, command)
    print(table([[r.node, r.verdict, r.detail] for r in results], ["node", "verdict", "detail"]))
    if any(r.verdict == "error" for r in results):
        from slurmforge.errors import DeployError

        raise DeployError("the check could not run on some nodes (see 'error' above)")


@task(
    driver_root=Option(
        "where the host's driver is (default /); a directory for a staged root", "/"
    ),
    format=Option("json (the mount plan) or cdi (a CDI spec, kind nvidia.com/gpu)", "json"),
)
def gpu_detect(c, driver_root, format):
    """Find the running NVIDIA driver's files and devices; print the read-only mount plan or CDI."""
    from pathlib import Path

    from slurmforge import gpu_driver
    from slurmforge.errors import ConfigError

    if format not in ("json", "cdi"):
        raise ConfigError(f"--format {format!r}: expected json or cdi")
    if not Path(driver_root).is_dir():  # a typo read as a host without a driver
        raise ConfigError(f"--driver-root {driver_root!r}: expected a directory")
    driver = gpu_driver.discover(Path(driver_root))
    if driver is None:
        files = " or ".join(gpu_driver.VERSION_FILES)
        print(
            f"no NVIDIA driver loaded under {driver_root} (no {files}): CPU mode, nothing to mount",
            file=sys.stderr,
        )
        if format == "json":
            print(
                json.dumps(
                    {"driver_root": driver_root, "version": None, "mounts": [], "devices": []}
                )
            )
        return
    for path in driver.ignored:
        print(
            f"warning: ignoring {path}: not of the running driver {driver.version}", file=sys.stderr
        )
    print(json.dumps(driver.cdi() if format == "cdi" else driver.plan(), indent=2))


@task(
    build=Option("write the site into this directory (new, empty, or an earlier --build's)"),
    port=Option("serve on 127.0.0.1:PORT (default 8008)"),
    check=Option("only name the generated pages and schemas that are stale (exit 1 if any)", False),
    generate=Option("only write the generated pages and schemas", False),
    pictures=Option("take the docs' pictures again (needs Docker and README's build)", False),
)
def docs(c, build, port, check, generate, pictures):
    """Regenerate the reference pages and schemas, then serve the docs site (or --build it)."""
    from slurmforge import docsgen

    if check:
        stale = docsgen.stale(ROOT)
        for path in stale:
            print(f"stale: {path} (invoke docs writes it)")
        if stale:
            raise Exit(code=1)
        return
    if pictures:  # the tests' own browser and terminal take them (tests/pictures.py)
        with c.cd(str(ROOT)):
            c.run(f"{sys.executable} -m tests.pictures")
        return
    if generate:
        for path in docsgen.write(ROOT):
            print(f"wrote {path}")
        return
    if build:
        docsgen.build(ROOT, out_dir("--build", build, ROOT))
        return
    docsgen.serve(ROOT, number("--port", port, 8008, integer=True, minimum=1, inclusive=True))


@task()
def version(c):
    """Print slurmforge's version (and, in a checkout, its commit)."""
    from slurmforge.version import describe

    print(f"slurmforge {describe(ROOT)}")
