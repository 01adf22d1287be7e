"""Matrix expansion, DAG order, selection and tag computation (no Docker)."""

from __future__ import annotations

import re

import pytest

from slurmforge import config, matrix, versions
from slurmforge.errors import ConfigError
from tests.common import ROOT


@pytest.fixture
def cfg() -> config.Config:
    return versions.load(ROOT / "versions.yaml")


def _ids(targets: list[matrix.BuildTarget]) -> list[str]:
    return [t.id for t in targets]


def test_ci_set_compiles_slurm_once_per_distro_and_version(cfg: config.Config) -> None:
    targets = matrix.expand(cfg, "ci", matrix.cells_of(cfg, "ci"))
    ids = _ids(targets)
    assert ids.count("base/debian12") == 1
    assert sorted(i for i in ids if i.startswith("slurm-debs/")) == [
        "slurm-debs/debian12-23.11.11",
        "slurm-debs/debian12-24.05.8",
    ]
    # base, mariadb, prometheus, slapd and JupyterLab's venv once per distro, nccl-tests once
    # per CUDA version; slurm-debs, runtime, slurmctld, slurmd, login, slurmdbd, slurmrestd,
    # exporter, portal and (one CUDA) worker and jail once per Slurm version
    assert ids.count("mariadb/debian12") == ids.count("prometheus/debian12") == 1
    assert ids.count("slapd/debian12") == ids.count("jupyter/debian12") == 1
    assert [i for i in ids if i.startswith("nccl-tests/")] == ["nccl-tests/debian12-12.2.2"]
    assert len(ids) == len(set(ids)) == 6 + 2 * 11


def test_parents_come_before_children(cfg: config.Config) -> None:
    targets = matrix.expand(cfg, "ci", matrix.cells_of(cfg, "ci"))
    position = {t.id: i for i, t in enumerate(targets)}
    for t in targets:
        for parent in t.parents:
            assert position[parent] < position[t.id], (parent, t.id)
    login = next(t for t in targets if t.id == "login/debian12-24.05.8")
    assert set(login.parents) == {"runtime/debian12-24.05.8", "slurm-debs/debian12-24.05.8"}


def test_cuda_independent_targets_are_shared_across_cuda_versions(shipped, write_config) -> None:
    shipped["cuda"]["12.4.1"] = {
        "runtime": {
            "wheels": [{"requirement": "nvidia-cuda-runtime-cu12==12.4.127", "sha256": "unpinned"}]
        },
        "build": shipped["cuda"]["12.2.2"]["build"],
        "tools": shipped["cuda"]["12.2.2"]["tools"],
    }
    shipped["sets"]["default"]["matrix"]["cuda"] = ["12.2.2", "12.4.1"]
    cfg = versions.load(write_config(shipped))
    targets = matrix.expand(cfg, "default", matrix.cells_of(cfg, "default"))
    ctld = [t for t in targets if t.component == "slurmctld"]
    assert len(ctld) == 1
    assert ctld[0].tags == (
        "127.0.0.1:5000/slurmforge/slurmctld:24.05.8-cuda12.2.2-debian12",
        "127.0.0.1:5000/slurmforge/slurmctld:24.05-cuda12.2.2-debian12",
        "127.0.0.1:5000/slurmforge/slurmctld:24.05.8-cuda12.4.1-debian12",
        "127.0.0.1:5000/slurmforge/slurmctld:24.05-cuda12.4.1-debian12",
    )
    # the GPU images are per CUDA version, on the shared Slurm build
    workers = [t for t in targets if t.component == "worker"]
    assert [t.id for t in workers] == [
        "worker/debian12-24.05.8-12.2.2",
        "worker/debian12-24.05.8-12.4.1",
    ]
    assert {p for t in workers for p in t.parents} == {
        "slurmd/debian12-24.05.8",
        "slurm-debs/debian12-24.05.8",
        "base/debian12",
        "nccl-tests/debian12-12.2.2",
        "nccl-tests/debian12-12.4.1",
    }


def test_tags_follow_the_set_templates(shipped, write_config) -> None:
    shipped["sets"]["default"]["registry"] = "registry.example:5000/hpc"
    shipped["sets"]["default"]["tags"] = ["{slurm}-{distro}", "{slurm_series}", "{component}-x"]
    cfg = versions.load(write_config(shipped))
    cell = matrix.Cell("debian12", "24.11.5", "12.2.2")
    assert matrix.tags_for(cfg.versions.sets["default"], "slurmd", cell) == [
        "registry.example:5000/hpc/slurmd:24.11.5-debian12",
        "registry.example:5000/hpc/slurmd:24.11",
        "registry.example:5000/hpc/slurmd:slurmd-x",
    ]
    assert cell.name == "24.11.5-cuda12.2.2-debian12"


def test_component_selection_keeps_only_what_it_is_built_from(cfg: config.Config) -> None:
    cells = matrix.cells_of(cfg, "default")
    assert _ids(matrix.expand(cfg, "default", cells, ["login"])) == [
        "base/debian12",
        "slurm-debs/debian12-24.05.8",
        "runtime/debian12-24.05.8",
        "login/debian12-24.05.8",
    ]


def test_unknown_component_is_refused(cfg: config.Config) -> None:
    with pytest.raises(
        ConfigError,
        match=r"--component 'gpu': unknown component; expected one "
        r"of exporter, jail, login, mariadb, portal, prometheus, slapd, slurmctld, slurmd, "
        r"slurmdbd, slurmrestd, worker",
    ):
        matrix.expand(cfg, "default", matrix.cells_of(cfg, "default"), ["gpu"])


def test_cell_selection(cfg: config.Config) -> None:
    cells = matrix.cells_of(cfg, "ci")
    picked = matrix.select_cells(cells, ["23.11.11-cuda12.2.2-debian12"], "ci")
    assert [c.slurm for c in picked] == ["23.11.11"]
    with pytest.raises(ConfigError, match="--cell 'nope' is not in set 'ci'"):
        matrix.select_cells(cells, ["nope"], "ci")


def test_cycle_is_reported() -> None:
    a = matrix.BuildTarget("a", (), ("b/",), ("x/a",), ())
    b = matrix.BuildTarget("b", (), ("a/",), ("x/b",), ())
    with pytest.raises(ConfigError, match="cycle"):
        matrix.order([a, b])


def test_an_arm64_cell_is_a_second_graph_whose_published_tags_are_the_amd64_ones(
    cfg: config.Config, shipped, write_config
) -> None:
    shipped["sets"]["grace"] = {**shipped["sets"]["default"]}
    shipped["sets"]["grace"]["matrix"] = {**shipped["sets"]["default"]["matrix"],
                                          "arch": ["amd64", "arm64"]}  # fmt: skip
    grace = versions.load(write_config(shipped))
    cells = matrix.cells_of(grace, "grace")
    assert [(c.name, c.arch) for c in cells] == [
        ("24.05.8-cuda12.2.2-debian12", "amd64"),
        ("24.05.8-cuda12.2.2-debian12-arm64", "arm64"),
    ]
    targets = matrix.expand(grace, "grace", cells)
    by_id = {t.id: t for t in targets}
    # the amd64 half is the default set's graph, with its IDs and tags
    default = matrix.expand(cfg, "default", matrix.cells_of(cfg, "default"))
    assert {t.id: t.tags for t in default}.items() <= {i: t.tags for i, t in by_id.items()}.items()
    # the arm64 half: every target once more, built from arm64 targets, except the builders:
    # they make arm64 parts on the amd64 base, as amd64 images: Slurm's packages, JupyterLab's
    # venv and nccl-tests (cross-compiled)
    arm = [t for t in targets if t.arch == "arm64"]
    assert len(arm) == len(default) and all(t.id.endswith("-arm64") for t in arm)
    debs = by_id["slurm-debs/debian12-24.05.8-arm64"]
    nccl = by_id["nccl-tests/debian12-12.2.2-arm64"]
    jupyter = by_id["jupyter/debian12-arm64"]
    for builder in (debs, nccl, jupyter):
        assert builder.parents == ("base/debian12",) and builder.platform == "linux/amd64"
    native = {"jupyter/debian12", "nccl-tests/debian12-12.2.2"}
    assert native <= set(by_id["jail/debian12-24.05.8-12.2.2"].parents)
    assert by_id["nccl-tests/debian12-12.2.2"].parents == ("base/debian12",)
    assert nccl.id in by_id["worker/debian12-24.05.8-12.2.2-arm64"].parents
    assert {nccl.id, jupyter.id} <= set(by_id["jail/debian12-24.05.8-12.2.2-arm64"].parents)
    rest = [t for t in arm if t not in (debs, nccl, jupyter)]
    assert all(by_id[p].arch == "arm64" for t in rest for p in t.parents)
    assert {t.platform for t in rest} == {"linux/arm64"}
    login = by_id["login/debian12-24.05.8-arm64"]
    assert login.tags == (
        "127.0.0.1:5000/slurmforge/login:24.05.8-cuda12.2.2-debian12-arm64",
        "127.0.0.1:5000/slurmforge/login:24.05-cuda12.2.2-debian12-arm64",
    )
    mset = grace.versions.sets["grace"]
    assert matrix.published_tags(mset, "login", cells[1]) == matrix.published_tags(
        mset, "login", cells[0]
    )


def test_arch_as_a_tag_placeholder_and_a_cell_of_its_own(shipped, write_config) -> None:
    shipped["sets"]["default"]["tags"] = ["{slurm}-{arch}"]
    shipped["sets"]["default"]["include"] = [
        {"distro": "debian12", "slurm": "24.05.8", "cuda": "12.2.2", "arch": "arm64"}
    ]
    cfg = versions.load(write_config(shipped))
    amd, arm = matrix.cells_of(cfg, "default")
    mset = cfg.versions.sets["default"]
    assert matrix.published_tags(mset, "slurmd", amd) == [
        "127.0.0.1:5000/slurmforge/slurmd:24.05.8-amd64"
    ]
    assert matrix.tags_for(mset, "slurmd", arm) == [
        "127.0.0.1:5000/slurmforge/slurmd:24.05.8-arm64-arm64"
    ]
    # the same cell twice is refused, the other arch is not the same cell
    shipped["sets"]["default"]["include"].append(shipped["sets"]["default"]["include"][0])
    duplicate = "include[1]: duplicate cell 24.05.8-cuda12.2.2-debian12-arm64"
    with pytest.raises(ConfigError, match=re.escape(duplicate)):
        matrix.cells_of(versions.load(write_config(shipped)), "default")
