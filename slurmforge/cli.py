"""The command line's options, declared once: help, default and how each becomes a value.

tasks.py declares each task with `task`, naming the option groups it takes (SELECT, FETCH,
TARGET) and its own options. A group is handed to the task's body as one value (a `Selection`,
a `FetchOptions`, a deploy `Where`), built by the group; its options' flags, help and defaults
come from here alone, so no task restates them. A failure of the package (SlurmforgeError)
becomes one ``error:`` line (and a hint) with exit status 2 for bad input, 1 otherwise.

Standard library and invoke only at import: the no-op build's fast path starts from here.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from invoke import Exit, Task
from invoke import task as invoke_task

from slurmforge.options import FetchOptions, out_dir

# the checkout: versions.yaml, deploy/ (tasks.py sets its own directory: a copy of the project
# runs on its own inputs with the installed package)
ROOT = Path(__file__).resolve().parent.parent
REQUIRED = inspect.Parameter.empty


@dataclass(frozen=True)
class Option:
    help: str
    default: Any = None  # REQUIRED: a positional argument; False: a flag
    iterable: bool = False  # repeatable; a list (or None) reaches the task


@dataclass(frozen=True)
class Group:
    """Options that reach a task's body as one value, named ``name``, made by ``build``."""

    name: str
    options: dict[str, Option]
    build: Callable[..., Any]
    keep: tuple[str, ...] = field(default=())  # of options, only these (default: all)

    def only(self, *names: str, **changed: Option) -> Group:
        """This group with only ``names`` (and ``changed`` replacing some of them)."""
        return Group(self.name, {**self.options, **changed}, self.build, names)

    @property
    def declared(self) -> dict[str, Option]:
        keep = self.keep or tuple(self.options)
        return {k: self.options[k] for k in keep}


# -- the matrix selection ------------------------------------------------------------------------


@dataclass(frozen=True)
class Select:
    """What a build-side task works on; the Project is made only when asked for (it brings
    the Docker SDK, which the no-op fast path does without)."""

    config: Path
    set: str
    cells: tuple[str, ...]
    components: tuple[str, ...]
    root: Path  # the checkout: where tasks.py, tests/ and .cache/ are

    def project(self):  # the Project (app.py): made only here
        from slurmforge.app import Project, Selection

        selection = Selection(self.config, self.set, self.cells, self.components, self.root)
        return Project(selection)


def config_path(config: str | None) -> Path:
    return Path(config).resolve() if config else ROOT / "versions.yaml"


def _select(set="default", cell=None, component=None, config=None) -> Select:
    cells = tuple([cell] if isinstance(cell, str) else cell or ())
    return Select(config_path(config), set, cells, tuple(component or ()), ROOT)


SELECT = Group(
    "select",
    {
        "set": Option("matrix set from versions.yaml (default: default)", "default"),
        "cell": Option(
            "only this cell, e.g. 24.11.5-cuda12.2.2-debian12 (repeatable)", iterable=True
        ),
        "component": Option(
            "only this component and what it is built from (repeatable)", iterable=True
        ),
        "config": Option("path to versions.yaml"),
    },
    _select,
)


# -- fetching sources ----------------------------------------------------------------------------


def _fetch(mirror=None, allow_unpinned=False, trust=None):
    return FetchOptions(mirror, allow_unpinned, tuple(trust or ()))


FETCH = Group(
    "fetch",
    {
        "mirror": Option(
            "rewrite source URLs onto this mirror URL or directory (<mirror>/<host>/<path>); "
            "default $SLURMFORGE_MIRROR"
        ),
        "allow_unpinned": Option(
            "accept sources whose sha256 is 'unpinned' (checksum of what was downloaded)", False
        ),
        "trust": Option(
            "origin (URL prefix) you trust to serve the right bytes (repeatable, required)",
            iterable=True,
        ),
    },
    _fetch,
    ("mirror", "allow_unpinned"),
)


# -- which cluster, on which target --------------------------------------------------------------


def _where(
    target="local", cluster=None, config=None, out=None, context=None, namespace=None, dry_run=False
):
    from slurmforge.deploy.target import Where

    out_root = out_dir("--out", out, ROOT / "deploy" / "out")
    cluster_file = Path(cluster).resolve() if cluster else ROOT / "deploy" / "cluster.yaml"
    return Where(cluster_file, config_path(config), out_root, target, context, namespace, dry_run,
                 cluster_given=cluster is not None)  # fmt: skip


TARGET = Group(
    "where",
    {
        "target": Option(
            "local (Docker Compose on this host) or k8s (kubectl apply of a kustomize dir)",
            "local",
        ),
        "cluster": Option("cluster file (default deploy/cluster.yaml)"),
        "config": SELECT.options["config"],
        "out": Option("where generated manifests go (default deploy/out)"),
        "context": Option("k8s: the kubeconfig context (default: kubectl's current one)"),
        "namespace": Option(
            "k8s: the namespace (default: kubernetes.namespace, else the cluster name)"
        ),
        "dry_run": Option(
            "write (k8s: and validate) what deploy would, start and apply nothing", False
        ),
    },
    _where,
    ("target", "cluster", "config", "out", "context", "namespace"),
)


# -- the task decorator --------------------------------------------------------------------------


def fails_cleanly(fn: Callable[..., Any]) -> Callable[..., Any]:
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
        except OSError as exc:
            # a path the system refused (--out /proc/x, a full disk): the path and why, exit 1
            if os.environ.get("SLURMFORGE_DEBUG") or exc.filename is None:
                raise
            raise Exit(f"error: {exc.filename}: {exc.strerror}", code=1) from None

    return wrapper


def _refuse_empty(given: dict[str, Any]) -> None:
    """An option given as '' (`--cluster "$UNSET"`) is refused, not read as left out: that
    took the default cluster file or deploy/out, and `render --out ''` wrote into the current
    directory."""
    from slurmforge.errors import ConfigError, quote

    for name, value in given.items():
        empty = [v for v in (value if isinstance(value, list) else [value])
                 if isinstance(v, str) and not v.strip()]  # fmt: skip
        if empty:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(
                f"{flag} {quote(empty[0])}: expected a value (or leave the option out)"
            )


class _Task(Task):
    """invoke's task, but a short flag is a letter or digit: invoke takes the first free character
    of the option's name, which for ``no_backup`` was the dash (``--`` then meant --no-backup).
    Never `h`: `-h` after a task's name is its help (options.help_asked)."""

    def arg_opts(self, name: str, default: str, taken_names: set[str]) -> dict[str, Any]:
        opts = super().arg_opts(name, default, taken_names)
        opts["names"] = [n for n in opts["names"] if len(n) > 1 or (n.isalnum() and n != "h")]
        return opts


def task(*groups: Group, **own: Option) -> Callable[[Callable[..., Any]], Any]:
    """An invoke task taking ``groups`` (each reaches the body as its one value, by the group's
    name) and ``own`` options (each by its own name). The body's parameters name what it uses."""

    def wrap(body: Callable[..., Any]) -> Any:
        grouped = {name: g for g in groups for name in g.declared}
        declared = {**{k: o for g in groups for k, o in g.declared.items()}, **own}
        params = [inspect.Parameter("c", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        # invoke gives each option the first free letter of its name as a short flag, in this
        # order: the groups' options, then the task's own
        required = [k for k in declared if declared[k].default is REQUIRED]
        for name in [*required, *(k for k in declared if k not in required)]:
            params.append(
                inspect.Parameter(
                    name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=declared[name].default
                )
            )

        @functools.wraps(body)
        def run(c: Any, **given: Any) -> Any:
            _refuse_empty(given)
            values = {k: v for k, v in given.items() if k not in grouped}
            for g in groups:
                values[g.name] = g.build(**{k: given[k] for k in g.declared})
            return body(c, **values)

        run.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        del run.__wrapped__  # invoke reads the signature above, not the body's
        return invoke_task(
            klass=_Task,
            help={k: o.help for k, o in declared.items()},
            iterable=[k for k, o in declared.items() if o.iterable],
        )(fails_cleanly(run))

    return wrap
