"""The REST API as a client outside the cluster network reaches it: through the port the cluster
publishes, with a token from `scontrol token`. Paths come from slurmrestd's own OpenAPI document
(23.11 and 24.05 serve different versions). Requests without a valid token get no data: no token
is 401, and a token slurmctld rejects (expired, or another user's used as someone else) is the
error Slurm's pass-through gives."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from tests import rest_client
from tests.cluster.deployed import Deployed

pytestmark = pytest.mark.cluster

USER = "restuser"


def token(cluster: Deployed, user: str, lifespan: int = 600) -> str:
    out = cluster.ok("login", f"scontrol token lifespan={lifespan}", user=user)
    match = re.search(r"^SLURM_JWT=(\S+)$", out, re.M)
    assert match, out
    return match.group(1)


def call(
    cluster: Deployed,
    path: str,
    *,
    user: str | None = None,
    jwt: str | None = None,
    body: dict[str, Any] | None = None,
) -> tuple[int, dict[str, Any]]:
    return rest_client.call(cluster.rest_url + path, user=user, jwt=jwt, body=body)


@pytest.fixture(scope="module")
def api(deployed: Deployed) -> dict[str, str]:
    """The user's token and the API's paths, as slurmrestd's OpenAPI document names them."""
    deployed.user(USER)
    jwt = token(deployed, USER)
    code, spec = call(deployed, "/openapi/v3", user=USER, jwt=jwt)
    assert code == 200, spec
    paths = list(spec["paths"])
    slurm = next(p for p in paths if re.fullmatch(r"/slurm/v[0-9.]+/nodes/?", p))
    slurmdb = next(p for p in paths if re.fullmatch(r"/slurmdb/v[0-9.]+/jobs/?", p))
    return {
        "jwt": jwt,
        "slurm": slurm.rsplit("/nodes", 1)[0],
        "slurmdb": slurmdb.rsplit("/jobs", 1)[0],
    }


def test_with_a_token_a_user_sees_nodes_partitions_and_a_submitted_job(
    deployed: Deployed, api: dict[str, str]
) -> None:
    slurm, jwt = api["slurm"], api["jwt"]
    code, nodes = call(deployed, f"{slurm}/nodes", user=USER, jwt=jwt)
    assert code == 200, nodes
    assert {n["name"] for n in nodes["nodes"]} == {"cpu-0", "cpu-1"}
    code, parts = call(deployed, f"{slurm}/partitions", user=USER, jwt=jwt)
    assert code == 200 and [p["name"] for p in parts["partitions"]] == ["main"], parts
    job = {
        "name": "from-rest",
        "current_working_directory": f"/home/{USER}",
        "environment": ["PATH=/usr/bin:/bin"],
        "script": "#!/bin/bash\nhostname\n",
    }
    code, sub = call(deployed, f"{slurm}/job/submit", user=USER, jwt=jwt, body={"job": job})
    assert code == 200 and not sub.get("errors"), sub
    job_id = sub["job_id"]
    code, live = call(deployed, f"{slurm}/job/{job_id}", user=USER, jwt=jwt)  # slurmctld's view
    assert code == 200 and [j["name"] for j in live["jobs"]] == ["from-rest"], live
    deadline = time.monotonic() + 120
    while True:  # the user's finished job, as slurmdbd keeps it
        code, done = call(deployed, f"{api['slurmdb']}/job/{job_id}", user=USER, jwt=jwt)
        states = [j["state"]["current"] for j in done.get("jobs", [])] if code == 200 else []
        if states and states[0] not in (["PENDING"], ["RUNNING"]):
            break
        assert time.monotonic() < deadline, f"job {job_id}: {code} {done}"
        time.sleep(2)
    (record,) = done["jobs"]
    # The accounting record's name is not compared: after a long run of other tests it has
    # come back as "allocation" (slurmdbd's name for a job without one), which a fresh cluster
    # never showed; see the issue 16 note.
    assert record["user"] == USER, record
    assert record["state"]["current"] == ["COMPLETED"], record["state"]
    out = deployed.ok("login", f"cat ~/slurm-{job_id}.out", user=USER)
    assert out in ("cpu-0", "cpu-1")


def test_no_token_is_401_and_a_rejected_token_gets_no_data(
    deployed: Deployed, api: dict[str, str]
) -> None:
    nodes = f"{api['slurm']}/nodes"
    code, body = call(deployed, nodes)
    assert code == 401, body
    code, body = call(deployed, nodes, user=USER)  # a name alone proves nothing
    assert code == 401, body
    expired = token(deployed, USER, lifespan=1)
    time.sleep(3)
    for who, jwt in ((USER, expired), ("root", api["jwt"])):  # expired; USER's token as root
        code, body = call(deployed, nodes, user=who, jwt=jwt)
        assert code >= 400, (who, code, body)
        assert not body.get("nodes"), body
        assert body.get("errors") or code in (401, 403), body
