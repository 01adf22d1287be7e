"""images/gpu/enroot.conf, read as enroot reads it (each ENROOT_ value through `eval echo`, in a
bash with `set -euo pipefail`): where a user's containers, runtime files and cache go in a task on
a node, on the login node, and in pyxis' job epilog (outside the jail, HOME unset) on a node
where the user ran nothing, which must not send enroot to write in the node's /tmp or /root."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.common import ROOT

CONF = ROOT / "images" / "gpu" / "enroot.conf"
READ = r"""set -euo pipefail
while IFS=$' \t=' read -r key value; do
  if [[ $key =~ ^ENROOT_(DATA|RUNTIME|CACHE)_PATH$ ]]; then
    printf '%s %s\n' "$key" "$(eval echo "$value")"
  fi
done < "$1"
"""


def _paths(tmp_path: Path, home: str | None) -> dict[str, str]:
    """The three paths as enroot would set them, with the image's /var/lib/slurmforge under
    ``tmp_path`` (and HOME as given: None, unset)."""
    conf = tmp_path / "enroot.conf"
    conf.write_text(CONF.read_text().replace("/var/lib/slurmforge", str(tmp_path / "vls")))
    env = {"PATH": os.environ["PATH"], **({"HOME": home} if home is not None else {})}
    out = subprocess.run(["bash", "-c", READ, "read", str(conf)], env=env, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return dict(line.split(" ", 1) for line in out.splitlines())


def test_a_task_on_a_node_keeps_its_containers_in_the_users_node_local_directory(
    tmp_path: Path,
) -> None:
    mine = tmp_path / "vls" / "enroot" / str(os.getuid())
    mine.mkdir(parents=True)
    paths = _paths(tmp_path, "/home/alice")
    assert paths == {
        "ENROOT_DATA_PATH": f"{mine}/data",
        "ENROOT_RUNTIME_PATH": f"{mine}/run",
        "ENROOT_CACHE_PATH": "/home/alice/.cache/enroot",
    }


def test_on_the_login_node_they_go_under_the_home(tmp_path: Path) -> None:
    (tmp_path / "vls" / "enroot").mkdir(parents=True)  # the jail's mount point, empty there
    assert _paths(tmp_path, "/home/alice") == {
        "ENROOT_DATA_PATH": "/home/alice/.local/share/enroot",
        "ENROOT_RUNTIME_PATH": "/home/alice/.cache/enroot-runtime",  # not the shared /tmp
        "ENROOT_CACHE_PATH": "/home/alice/.cache/enroot",
    }


def test_pyxis_epilog_on_a_node_the_user_ran_nothing_on_writes_nowhere(tmp_path: Path) -> None:
    (tmp_path / "vls" / "enroot").mkdir(parents=True)  # no directory of this user's
    none = str(tmp_path / "vls" / "no-containers")
    assert _paths(tmp_path, None) == dict.fromkeys(
        ("ENROOT_DATA_PATH", "ENROOT_RUNTIME_PATH", "ENROOT_CACHE_PATH"), none
    )
