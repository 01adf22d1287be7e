"""The tasks' reference page: each task's help exactly as ``invoke --help TASK`` prints it (invoke's
own help, from the options declared in cli.py), in the order tasks.py declares them."""

from __future__ import annotations

import contextlib
import importlib.util
import io
from pathlib import Path

INTRO = """Every command is an [invoke](https://www.pyinvoke.org/) task run from the checkout:
`.venv/bin/invoke TASK [OPTIONS]`. `invoke --list` lists them and `invoke --help TASK` prints what
follows, as does `--help` (or `-h`) anywhere after a task's name. Bad input exits with code 2 and
one `error:` line (often a `hint:` line after it) naming the file, the key and what was expected;
a failed build or deploy exits 1; `SLURMFORGE_DEBUG=1` adds the traceback. Options that say
*repeatable* may be given several times. This page is generated from the tasks themselves
(`invoke docs --check` says when it is stale)."""


def _collection(root: Path):
    from invoke import Collection

    spec = importlib.util.spec_from_file_location("slurmforge_tasks", root / "tasks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return Collection.from_module(module)


def _help(root: Path, name: str) -> str:
    from invoke import Program

    # tasks loaded anew for each: printing a task's help consumes it (invoke pops the options'
    # help texts as it builds the parser), so a second print from the same tasks has none
    program = Program(namespace=_collection(root), binary="invoke")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        program.run(["invoke", "--help", name], exit=False)
    return out.getvalue().replace("inv[oke]", "invoke").strip()


def page(root: Path) -> str:
    collection = _collection(root)
    lines = ["# Tasks and options", "", INTRO, ""]
    for name in collection.task_names:
        task = collection[name]
        doc = (task.__doc__ or "").strip().splitlines()[0]
        lines += [f"## `invoke {name}` {{#{name}}}", "", doc, ""]
        for arg in task.positional:  # invoke's help does not say which options these are
            flag = arg.replace("_", "-")
            lines += [f"`--{flag}` may be given without its flag, as the first value after the "
                      f"task's name (`invoke {name} VALUE`).", ""]  # fmt: skip
        lines += ["```text", _help(root, name), "```", ""]
    return "\n".join(lines).rstrip() + "\n"
