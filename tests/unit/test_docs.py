"""The docs site, as its readers and editors meet it: it builds with no broken link or page left
out of its navigation; the reference pages and the JSON Schemas are what the code makes now; the
files slurmforge ships validate against their schemas, which refuse what the loaders refuse; every
cluster or versions block of the docs loads through the real loaders and every Python block runs;
and each error message the error reference quotes is one the code can still print."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from slurmforge import docsgen
from slurmforge.docsgen import schema
from slurmforge.errors import ConfigError
from slurmforge.inputs import read_yaml, validate
from tests import docs_blocks
from tests.common import ROOT, dump_yaml, load_yaml

SHIPPED = {"cluster": ROOT / "deploy" / "cluster.yaml", "versions": ROOT / "versions.yaml"}


def test_the_site_builds_with_no_broken_link_and_no_page_left_out(tmp_path: Path) -> None:
    # not -q: strict mode fails on the warnings it logs, which -q would not log
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "site" / "search" / "search_index.json").is_file()
    for name in schema.FILES.values():  # published beside the pages, for editors to fetch
        site = (tmp_path / "site" / "schema" / name).read_text()
        assert site == (ROOT / schema.DIR / name).read_text()


def test_the_generated_pages_and_schemas_are_what_the_code_makes_now() -> None:
    assert docsgen.stale(ROOT) == [], "`invoke docs --generate` writes them"


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_file_names_its_schema_and_validates_against_it(name: str) -> None:
    text = SHIPPED[name].read_text()
    where = os.path.relpath(ROOT / schema.DIR / schema.FILES[name], SHIPPED[name].parent)
    assert f"# yaml-language-server: $schema={where}\n" in text
    jsonschema.Draft202012Validator(schema.SCHEMAS[name]()).validate(load_yaml(text))


@pytest.mark.parametrize(
    ("name", "change"),
    [
        ("cluster", lambda d: d.update(nodes=3)),
        ("cluster", lambda d: d["nodesets"][0].update(replica=3)),
        ("cluster", lambda d: d.update(controller={"failover_after": 2})),
        ("cluster", lambda d: d["nodesets"].append({"name": "gpu2", "cpus": 4})),
        ("versions", lambda d: d["sets"]["default"].update(regsitry="x")),
        ("versions", lambda d: d["accounts"]["slurm"].update(uid="401")),
    ],
    ids=["unknown-key", "nested-unknown-key", "out-of-range", "no-definitions", "typo", "type"],
)
def test_the_schema_refuses_what_the_loader_refuses(name: str, change, tmp_path: Path) -> None:
    data = load_yaml(SHIPPED[name].read_text())
    change(data)
    errors = list(jsonschema.Draft202012Validator(schema.SCHEMAS[name]()).iter_errors(data))
    assert errors, "the schema took it"
    model = {"cluster": schema.ClusterSpec, "versions": schema.Versions}[name]
    shutil.copytree(ROOT / "deploy" / "layers", tmp_path / "layers")
    path = tmp_path / f"{name}.yaml"
    path.write_text(dump_yaml(data))
    raw = read_yaml(path)
    if name == "cluster":  # the loader applies layers first: a set without any misses keys
        from slurmforge.deploy.spec import layers

        layers.apply(path, raw)
    with pytest.raises(ConfigError):
        validate(model, raw, path)


def test_every_cluster_and_versions_block_of_the_docs_loads_and_every_python_block_runs() -> None:
    found = [b for page in docs_blocks.pages() for b in docs_blocks.blocks(page)]
    titled = [b for b in found if b.title in docs_blocks.TITLES]
    assert len(titled) >= 20, [b.where for b in titled]
    problems = [p for b in found if (p := docs_blocks.check(b))]
    assert problems == []


def test_a_block_that_would_not_load_is_caught(tmp_path: Path) -> None:
    page = ROOT / "docs" / "index.md"
    bad = docs_blocks.Block(page, 1, "yaml", "cluster.yaml (part)", "controller:\n  replica: 2\n")
    assert "controller.replica" in (docs_blocks.check(bad) or "")
    untitled = docs_blocks.Block(
        page, 1, "yaml", None, "mounts:\n  - {path: /data, hostpath: /d}\n"
    )
    assert "mounts" in (docs_blocks.check(untitled) or "")
    raises = docs_blocks.Block(page, 1, "python", None, "assert 1 + 1 == 3\n")
    assert "raised" in (docs_blocks.check(raises) or "")


def test_each_message_the_error_reference_quotes_is_one_the_code_prints() -> None:
    page = ROOT / "docs" / "reference" / "errors.md"
    assert len(docs_blocks.quoted_messages(page)) >= 25
    assert docs_blocks.stale_messages(page) == []


def test_readme_is_a_front_page_with_the_two_commands_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    ci = (ROOT / ".ci" / "run").read_text()
    for command in (
        "scripts/setup && .venv/bin/invoke build && .venv/bin/invoke deploy",
        "scripts/setup && .venv/bin/pytest",
    ):
        assert f"\n{command}\n" in readme
    assert "scripts/setup && .venv/bin/pytest\n" in ci
