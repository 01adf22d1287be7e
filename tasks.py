"""slurmforge tasks: argument parsing and printing only; the work happens in the package."""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from invoke import Exit, task

from slurmforge.options import number, out_dir, parse_errors_exit_2

parse_errors_exit_2()

HERE = Path(__file__).resolve().parent
SELECT_HELP = {
    "set": "matrix set from versions.yaml (default: default)",
    "cell": "only this cell, e.g. 24.11.5-cuda12.2.2-debian12 (repeatable)",
    "component": "only this component and what it is built from (repeatable)",
    "config": "path to versions.yaml",
}
FETCH_HELP = {
    "mirror": "rewrite source URLs onto this mirror URL or directory (<mirror>/<host>/<path>); "
    "default $SLURMFORGE_MIRROR",
    "allow_unpinned": "accept sources whose sha256 is 'unpinned' (checksum of what was downloaded)",
}


def _fails_cleanly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn a SlurmforgeError into one line (+ hint) and exit 2 (bad input) or 1 (failure)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from slurmforge.errors import SlurmforgeError

        try:
            return fn(*args, **kwargs)
        except SlurmforgeError as exc:
            if os.environ.get("SLURMFORGE_DEBUG"):
                raise
            from slurmforge.refs import redact

            hint = f"\nhint: {exc.hint}" if exc.hint else ""
            raise Exit(redact(f"error: {exc.message}{hint}"), code=exc.exit_code) from None

    return wrapper


def _config_path(config: str | None) -> Path:
    return Path(config).resolve() if config else HERE / "versions.yaml"


def _project(set: str, cell: list[str] | None, component: list[str] | None, config: str | None):
    from slurmforge.app import Project, Selection

    return Project(Selection(_config_path(config), set, tuple(cell or ()), tuple(component or ())))


def _print_summary(rows: list[dict[str, Any]]) -> None:
    table = [
        [r["target"], r["status"], f"{r['seconds']:.1f}s", _size(r["size"]), _note(r)] for r in rows
    ]
    print(_table(table, ["target", "status", "time", "size", "note"]))
    if any(r.get("lacking") for r in rows):
        print(SKIPPED_HINT, file=sys.stderr)


def _note(row: dict[str, Any]) -> str:
    lack = f"without {', '.join(row['lacking'])}" if row.get("lacking") else ""
    return "; ".join(part for part in (row["note"], lack) if part)


def _fetch_options(mirror: str | None, allow_unpinned: bool, trust: list[str] | None = None):
    from slurmforge.app import FetchOptions

    return FetchOptions(mirror, allow_unpinned, tuple(trust or ()))


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows, strict=True)]
    lines = [header, ["-" * w for w in widths], *rows]
    return "\n".join(
        "  ".join(str(x).ljust(w) for x, w in zip(r, widths, strict=True)).rstrip() for r in lines
    )


def _size(n: int) -> str:
    return f"{n / 1e6:.0f} MB" if n else "-"


@task(
    iterable=["cell", "component"],
    help={
        **SELECT_HELP,
        **FETCH_HELP,
        "jobs": "targets built concurrently (default 2)",
        "dry_run": "show what would be built and why, build nothing",
        "fail_fast": "stop at the first failure (running builds are cancelled)",
    },
)
@_fails_cleanly
def build(
    c,
    set="default",
    cell=None,
    component=None,
    jobs=None,
    dry_run=False,
    fail_fast=False,
    mirror=None,
    allow_unpinned=False,
    config=None,
):
    """Build the images of a matrix set; unchanged targets are reused without calling docker."""
    jobs = number("--jobs", jobs, 2, integer=True)
    if not dry_run and not allow_unpinned:
        from slurmforge import fastpath

        rows = fastpath.check(_config_path(config), set, cell or (), component or ())
        if rows is not None:
            _print_summary(rows)
            return
    project = _project(set, cell, component, config)
    if dry_run:
        _print_plan(project)
        return
    results, skipped = project.build(_fetch_options(mirror, allow_unpinned), jobs, fail_fast)
    _print_summary([r.row() for r in results])
    _print_skipped(skipped, hint=False)
    failed = [r for r in results if not r.ok]
    if failed:
        from slurmforge.errors import BuildError

        raise BuildError(
            f"{len(failed)} of {len(results)} targets did not build",
            hint=f"logs in {HERE / '.cache/logs/latest'}",
        )


SKIPPED_HINT = (
    "hint: optional features were skipped (see 'without …' above; the images carry the label "
    "io.slurmforge.skipped). Supply their sources with --mirror DIR (laid out as "
    "DIR/<host>/<path>), or where GitHub is reachable run `invoke lock --trust "
    "https://github.com/NVIDIA/` and build again."
)


def _print_skipped(skipped: dict[str, str], hint: bool = True) -> None:
    """Why each optional feature was skipped (a build's summary gives the hint itself)."""
    for feature, why in sorted(skipped.items()):
        print(f"skipped {feature}: {why}", file=sys.stderr)
    if skipped and hint:
        print(SKIPPED_HINT, file=sys.stderr)


def _print_plan(project) -> None:
    rows = [[d.target.id, str(d.action), d.reason, d.target.ref] for d in project.plan()]
    print(_table(rows, ["target", "action", "why", "image"]))


@task(iterable=["cell", "component"], help=SELECT_HELP)
@_fails_cleanly
def plan(c, set="default", cell=None, component=None, config=None):
    """Show what `build` would do for each target and why (which input changed)."""
    _print_plan(_project(set, cell, component, config))


@task(iterable=["cell", "component"], help={**SELECT_HELP, **FETCH_HELP})
@_fails_cleanly
def fetch(
    c, set="default", cell=None, component=None, mirror=None, allow_unpinned=False, config=None
):
    """Download and verify the upstream sources of the selected cells into .cache/sources."""
    project = _project(set, cell, component, config)
    options = _fetch_options(mirror, allow_unpinned)
    optional, skipped = project.fetch_optional(options)
    for f in project.fetch(options) + optional:
        print(f"{f.sha256}  {f.path}")
    _print_skipped(skipped)


@task(
    iterable=["cell", "component", "trust"],
    help={
        **SELECT_HELP,
        "mirror": FETCH_HELP["mirror"],
        "trust": "origin (URL prefix) you trust to serve the right bytes (repeatable, required)",
    },
)
@_fails_cleanly
def lock(c, trust=None, set="default", cell=None, component=None, mirror=None, config=None):
    """Record sha256 of unpinned sources fetched from a trusted origin into versions.lock."""
    project = _project(set, cell, component, config)
    fetched, skipped, path = project.lock(_fetch_options(mirror, False, trust))
    for f in fetched:
        print(f"{f.sha256}  {f.source.url}")
    _print_skipped(skipped)
    print(f"recorded in {path}", file=sys.stderr)


@task(
    help={
        "set": SELECT_HELP["set"],
        "config": SELECT_HELP["config"],
        "format": "table, json, or github (one-line JSON for a GitHub Actions matrix)",
    }
)
@_fails_cleanly
def matrix(c, set="default", format="table", config=None):
    """List the cells of a matrix set and the image each component gets."""
    from slurmforge.app import matrix_rows

    rows = matrix_rows(_project(set, None, None, config))
    if format == "json":
        print(json.dumps(rows, indent=2))
    elif format == "github":
        print(json.dumps({"include": rows}, separators=(",", ":")))
    elif format == "table":
        keys = list(rows[0]) if rows else ["cell"]
        print(_table([[r[k] for k in keys] for r in rows], keys))
    else:
        from slurmforge.errors import ConfigError

        raise ConfigError(f"--format {format!r}: expected table, json or github")


@task(iterable=["cell", "component"], help={**SELECT_HELP, "out": "directory to write into"})
@_fails_cleanly
def render(c, out, set="default", cell=None, component=None, config=None):
    """Write the rendered Dockerfiles of the selected targets under OUT for review."""
    where = out_dir("--out", out, Path.cwd())
    for path in _project(set, cell, component, config).render(where):
        print(path)


@task(
    help={
        **SELECT_HELP,
        "images": "also remove the selected set's images (all their tags)",
        "sources": "also empty the source cache (.cache/sources)",
    },
    iterable=["cell", "component"],
)
@_fails_cleanly
def clean(c, set="default", cell=None, component=None, images=False, sources=False, config=None):
    """Remove logs and temporary files; optionally images and cached sources."""
    for item in _project(set, cell, component, config).clean(images, sources):
        print(f"removed {item}")


@task(
    iterable=["cell", "component"],
    help={
        **SELECT_HELP,
        "registry": "push to this registry prefix instead of the set's (HOST[:PORT][/PATH])",
        "force": "push even images whose image tests have not passed",
        "retries": "retries of a transient failure per tag, with backoff (default 4)",
    },
)
@_fails_cleanly
def push(
    c,
    set="default",
    cell=None,
    component=None,
    registry=None,
    force=False,
    retries=None,
    config=None,
):
    """Push every tag of the selected built, tested images; record their digests in build/."""
    from slurmforge import push as push_mod

    retries = number("--retries", retries, 4, integer=True, inclusive=True)
    if registry:
        push_mod.check_registry(registry)  # refused before Docker is asked anything
    project = _project(set, cell, component, config)
    pushed, lock = push_mod.push(project, registry, force, retries)
    print(_table(push_mod.summary(pushed), ["image", "digest", "sent", "existed", "tries", "time"]))
    print(f"digests recorded in {lock}", file=sys.stderr)


@task(
    iterable=["cell"],
    help={
        "set": SELECT_HELP["set"],
        "cell": SELECT_HELP["cell"],
        "config": SELECT_HELP["config"],
    },
)
@_fails_cleanly
def test_images(c, set="default", cell=None, config=None):
    """Build (if needed) and run the image tests on a set's images; a pass is recorded for push."""
    if _project(set, cell, None, config).run_tests("image"):
        raise Exit("error: the image tests failed; nothing was recorded as tested", code=1)


@task(
    iterable=["cell"],
    help={
        "set": SELECT_HELP["set"],
        "cell": "the cell whose images the cluster runs (needed when the set has several)",
        "config": SELECT_HELP["config"],
    },
)
@_fails_cleanly
def test_cluster(c, set="default", cell=None, config=None):
    """Build (if needed) and run the cluster tests (tests/cluster) on one cell's images."""
    if _project(set, cell, None, config).run_tests("cluster"):
        raise Exit("error: the cluster tests failed", code=1)


DEPLOY_HELP = {
    "cluster": "cluster file (default deploy/cluster.yaml)",
    "config": SELECT_HELP["config"],
    "out": "where generated manifests go (default deploy/out)",
}

TARGET_HELP = {
    **DEPLOY_HELP,
    "target": "local (Docker Compose on this host) or k8s (kubectl apply of a kustomize dir)",
    "context": "k8s: the kubeconfig context (default: kubectl's current one)",
    "namespace": "k8s: the namespace (default: kubernetes.namespace, else the cluster name)",
}


def _cluster_file(cluster: str | None) -> Path:
    return Path(cluster).resolve() if cluster else HERE / "deploy" / "cluster.yaml"


def _where(cluster, config, out, target="local", context=None, namespace=None, dry_run=False):
    from slurmforge.deploy import Where

    out_root = out_dir("--out", out, HERE / "deploy" / "out")
    cluster_file, config_file = _cluster_file(cluster), _config_path(config)
    return Where(cluster_file, config_file, out_root, target, context, namespace, dry_run)


def _target(cluster, config, out, target, context, namespace):
    from slurmforge.deploy import open_target

    return open_target(_where(cluster, config, out, target, context, namespace))


@task(
    help={
        **TARGET_HELP,
        "timeout": "seconds to wait for every node (default 180; k8s: per wait, default 600)",
        "dry_run": "k8s: write and validate the manifests, apply nothing",
    }
)
@_fails_cleanly
def deploy(
    c,
    target="local",
    cluster=None,
    config=None,
    out=None,
    timeout=None,
    context=None,
    namespace=None,
    dry_run=False,
):
    """Generate the manifests, populate the jail, start the cluster and wait for its nodes."""
    from slurmforge.deploy import deploy as deploy_cluster

    where = _where(cluster, config, out, target, context, namespace, dry_run)
    for line in deploy_cluster(where, timeout):
        print(line)


@task(help=TARGET_HELP)
@_fails_cleanly
def status(c, target="local", cluster=None, config=None, out=None, context=None, namespace=None):
    """Containers of the cluster and what Slurm says about its nodes and jobs."""
    print(_target(cluster, config, out, target, context, namespace).status())


@task(
    help={
        **TARGET_HELP,
        "volumes": "also delete the jail, the controller state, the accounting database and "
        "the secrets",
    }
)
@_fails_cleanly
def down(
    c,
    target="local",
    cluster=None,
    config=None,
    out=None,
    context=None,
    namespace=None,
    volumes=False,
):
    """Stop and remove the cluster's containers (and with --volumes, its data)."""
    _target(cluster, config, out, target, context, namespace).down(volumes)


@task(
    help={
        **TARGET_HELP,
        "spec": "NODESET=N, e.g. cpu=3",
        "timeout": "seconds to wait for draining and for new nodes (default 180; k8s: 600)",
    }
)
@_fails_cleanly
def scale(
    c,
    spec,
    target="local",
    cluster=None,
    config=None,
    out=None,
    timeout=None,
    context=None,
    namespace=None,
):
    """Change a node set's node count: removed nodes are drained first, new ones join idle."""
    from slurmforge.deploy import scale as scale_nodes

    where = _where(cluster, config, out, target, context, namespace)
    removed = scale_nodes(where, spec, timeout)
    print(f"scaled: {spec}" + (f" (removed {', '.join(removed)})" if removed else ""))


@task(help={**TARGET_HELP, "user": "log in as this jail user instead of root"})
@_fails_cleanly
def login(
    c, user=None, target="local", cluster=None, config=None, out=None, context=None, namespace=None
):
    """Open a shell inside the jail on the login node."""
    if user is not None:
        from slurmforge.deploy.model import check_user

        check_user(user)  # refused before the cluster is asked anything
    argv = _target(cluster, config, out, target, context, namespace).login_argv(user)
    os.execvp(argv[0], argv)


@task(
    help={
        "into": "a directory (absolute or ./relative) or a Docker volume name",
        "set": SELECT_HELP["set"],
        "cell": "the cell whose jail image to use (default: the set's only cell)",
        "keep": "extra path kept as user state (repeatable)",
        "config": SELECT_HELP["config"],
    },
    iterable=["keep"],
)
@_fails_cleanly
def jail_populate(c, into, set="default", cell=None, keep=None, config=None):
    """Copy the jail image's filesystem into a directory or volume (idempotent, resumable)."""
    from slurmforge import jail

    jail.check_into(into)  # refused before Docker is asked anything
    project = _project(set, [cell] if cell else None, ["jail"], config)
    jail.populate(project.engine, project.jail_ref, into, keep or ())


@task(
    help={
        **TARGET_HELP,
        "min_busbw": "drain nodes below this bus bandwidth, GB/s (default: gpu.min_busbw)",
        "command": "run this instead of all_reduce_perf on each node (wrappers, tests)",
    }
)
@_fails_cleanly
def gpu_check(
    c,
    target="local",
    cluster=None,
    config=None,
    out=None,
    context=None,
    namespace=None,
    min_busbw=None,
    command=None,
):
    """Run the GPU health check once on every GPU node: drain slow ones, resume recovered ones."""
    threshold = number("--min-busbw", min_busbw, inclusive=True)
    results = _target(cluster, config, out, target, context, namespace).gpu_check(
        threshold, command
    )
    print(_table([[r.node, r.verdict, r.detail] for r in results], ["node", "verdict", "detail"]))
    if any(r.verdict == "error" for r in results):
        from slurmforge.errors import DeployError

        raise DeployError("the check could not run on some nodes (see 'error' above)")


@task(
    help={
        "driver_root": "where the host's driver is (default /); a directory for a staged root",
        "format": "json (the mount plan) or cdi (a CDI spec, kind nvidia.com/gpu)",
    }
)
@_fails_cleanly
def gpu_detect(c, driver_root="/", format="json"):
    """Find the running NVIDIA driver's files and devices; print the read-only mount plan or CDI."""
    from slurmforge import gpu_driver
    from slurmforge.errors import ConfigError

    if format not in ("json", "cdi"):
        raise ConfigError(f"--format {format!r}: expected json or cdi")
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
