"""What the cluster tier's tests share: a clean refusal, a batch job waited for, sacct once the
records are in, a program users compile, a user's own key for ssh between nodes, and the cells
the upgrade goes between."""

from __future__ import annotations

import shlex
import time

import pytest

from tests.cluster.deployed import Deployed


def clean_failure(proc, expected: str) -> None:
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: ") and expected in proc.stderr.splitlines()[0], (
        proc.stderr
    )


def sbatch_wait(cluster: Deployed, user: str, script: str) -> str:
    """Submit ``script`` (wrapped) and wait for it to end; its job ID."""
    code, out = cluster.sh("login", f"sbatch --parsable --wait --wrap '{script}'", user=user)
    job = out.strip().splitlines()[0].split(";")[0] if out.strip() else ""
    assert job.isdigit(), f"sbatch exited {code}: {out}"
    return job


def sacct(cluster: Deployed, user: str, jobs: list[str], timeout: float = 60) -> dict[str, list]:
    """Job ID → [State, ExitCode, Elapsed] as the user's sacct says, once every job is there
    and ended (records reach slurmdbd asynchronously)."""
    deadline = time.monotonic() + timeout
    rows: dict[str, list] = {}
    while time.monotonic() < deadline:
        code, out = cluster.sh(
            "login",
            f"sacct -n -P -X -j {','.join(jobs)} -o JobID,State,ExitCode,Elapsed",
            user=user,
        )
        rows = {r.split("|")[0]: r.split("|")[1:] for r in out.splitlines() if "|" in r}
        if code == 0 and all(j in rows and rows[j][0] not in ("PENDING", "RUNNING") for j in jobs):
            return rows
        time.sleep(2)
    pytest.fail(f"sacct did not list jobs {jobs} within {timeout} s: {rows}")


HELLO = r"""
#include <mpi.h>
#include <stdio.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int rank, size, sum = 0;
	char host[256];

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	gethostname(host, sizeof(host));
	printf("rank %d of %d on %s sum %d\n", rank, size, host, sum);
	MPI_Finalize();
	return 0;
}
"""


# the upgrade test's cells, from and to (tests/prebuild.py builds them early in CI)
# run as a user: a key of their own for ssh from node to node, in the home every node shares
# (as on any cluster)
OWN_SSH_KEY = (
    "test -f ~/.ssh/id_ed25519 || ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519;"
    " cat ~/.ssh/id_ed25519.pub >> ~/.ssh/authorized_keys"
)

FROM = ("default", "24.05.8-cuda12.2.2-debian12")
TO = ("current", "25.11.7-cuda12.2.2-debian12")


# a scrape as the cluster's Prometheus makes one, with the metrics token (run where it is mounted:
# the exporter's container); the port is its argument
SCRAPE = (
    "import sys, urllib.request as u; "
    "token = open('/run/secrets/metrics-token').read().strip(); "
    "url = f'http://127.0.0.1:{sys.argv[1]}/metrics'; "
    "print(u.urlopen(u.Request(url, headers={'Authorization': f'Bearer {token}'})).read().decode())"
)


def scrape(port: int) -> str:
    """The command that prints a scrape of the exporter's container on ``port``."""
    return f"python3 -c {shlex.quote(SCRAPE)} {port}"


def http_status(host: str, port: int, path: str) -> str:
    """A shell line that prints the status line of a plain GET (bash alone: no client needed),
    or 'closed' when nothing on the user's network answers there."""
    connect = f"exec 3<>/dev/tcp/{host}/{port} || exit 1"
    request = f"printf 'GET {path} HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n' >&3"
    script = f"{connect}; {request}; head -1 <&3 | tr -d '\\r'"
    return f"timeout 5 bash -c {shlex.quote(script)} 2> /dev/null || echo closed"
