"""Every name in slurmforge/jail_contract.py is the one the shell hooks and the C plugin use: a
rename on one side only fails here, not in a cluster."""

from __future__ import annotations

import re
import subprocess

from slurmforge import jail_contract as jc
from tests.common import ROOT

POPULATE = (ROOT / "jail/populate/populate").read_text()
LOGIN_HOOKS = [
    (ROOT / f"images/login/{f}").read_text() for f in ("jail-mounts.sh", "ssh-host-keys.sh")
]
PLUGIN_C = (ROOT / "jail/spank/slurmforge_jail.c").read_text()
PLUGIN_MAKE = (ROOT / "jail/spank/Makefile").read_text()


def test_populate_reads_its_inputs_and_leaves_the_marker_and_sentinel() -> None:
    for env in (jc.DIGEST_ENV, jc.KEEP_ENV, jc.RSYNC_OPTS_ENV, jc.SKIP_ENV, jc.PART_ENV):
        assert f"${{{env}:-" in POPULATE, env
    assert f"target=${{1:-{jc.ROOT}}}" in POPULATE
    state, marker = jc.MARKER.split("/")
    assert jc.SENTINEL.split("/")[0] == state
    assert f'state="$target/{state}"' in POPULATE
    assert f'"$state/{marker}"' in POPULATE
    assert f'sentinel="$state/{jc.SENTINEL.split("/")[1]}"' in POPULATE
    assert jc.sentinel("/x") == f"/x/{jc.SENTINEL}"


def test_populate_records_what_it_left_out_as_the_pods_that_wait_for_it_expect() -> None:
    """The sentinel's line, as populate's own shell makes it from its environment, is what
    jail_contract.record gives the waits (the k8s init containers, a local redeploy)."""
    (line,) = [x for x in POPULATE.splitlines() if x.startswith("record=")]
    for skip in ((), ("/usr/lib/a", "/usr/local/bin/b")):
        env = {jc.DIGEST_ENV: "sha256:1", **jc.populate_env("sha256:1", (), skip=skip)}
        script = f'digest=${jc.DIGEST_ENV} skip=${{{jc.SKIP_ENV}:-}}\n{line}\necho "$record"'
        made = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
        assert made.stdout == jc.record("sha256:1", skip) + "\n", made.stderr


def test_the_login_hooks_find_the_jail_and_its_config_where_the_nodes_do() -> None:
    for hook in LOGIN_HOOKS:
        assert f"jail=${{{jc.ROOT_ENV}:-{jc.ROOT}}}" in hook
    assert f"jail_conf=${{{jc.CONF_ENV}:-{jc.CONF}}}" in LOGIN_HOOKS[0]
    assert f"${{{jc.SCRATCH_ENV}:-}}" in LOGIN_HOOKS[0]


def test_the_plugin_takes_every_argument_it_is_given_and_knows_its_modes() -> None:
    parsed = set(re.findall(r'set_option\(av\[i\], "([a-z]+)"', PLUGIN_C))
    assert parsed == set(jc.PLUGIN_OPTIONS)
    for spool, local in (("/var/spool/slurmd", None), ("/s", "/var/lib/x")):
        args = dict(a.split("=", 1) for a in jc.plugin_args(spool, local).split())
        assert set(args) <= parsed
        assert args["root"] == jc.ROOT and args["conf"] == jc.CONF and args["spool"] == spool
        assert args.get("local") == local
    assert f'root_dir[PATH_MAX] = "{jc.ROOT}"' in PLUGIN_C  # its default, for a bare plugstack
    assert f'getenv("{jc.MODE_ENV}")' in PLUGIN_C
    assert set(re.findall(r'mode_is\("([a-z-]+)"\)', PLUGIN_C)) == set(jc.MODES)
    assert f"pkg{jc.PLUGIN}" in PLUGIN_MAKE  # where the package installs it


def test_plugstack_loads_the_plugin_with_the_contracts_arguments(tmp_path, write_cluster) -> None:
    from slurmforge.deploy import loader
    from slurmforge.deploy.slurm import conf as slurmconf
    from slurmforge.versions import load

    cluster = loader.load(
        write_cluster(
            {
                "name": "c",
                "nodesets": [{"name": "cpu", "definitions": ["cpu-small"], "replicas": 1}],
                "partitions": [{"name": "main", "nodesets": ["cpu"]}],
            }
        ),
        load(ROOT / "versions.yaml"),
    )
    for pyxis in (False, True):
        plugstack = slurmconf.render(cluster, None, pyxis)["plugstack.conf"]
        line = next(ln for ln in plugstack.splitlines() if jc.PLUGIN in ln)
        local = slurmconf.ENROOT_LOCAL if pyxis else None
        assert line == f"required {jc.PLUGIN} {jc.plugin_args(slurmconf.SPOOL_DIR, local)}"
