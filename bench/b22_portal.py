"""B22 (the portal issue's "B21"; bench/b21_elastic.py had the number): what the web portal adds
to starting a job, and what its hub holds at rest.

One throwaway cluster from the shipped cluster file with `portal.enabled`, and a local user with
a password. Each round, alternately:
- portal: in Debian's Chromium (Selenium), "Start" on the form to JupyterLab's launcher shown
  and usable (its cards rendered), then "Stop My Server" and the job gone;
- baseline: `sbatch` of a job asking the same (one task, 1 CPU, 1024 MB, 60 min) from the
  user's login session, submission to RUNNING in squeue, then scancel.

Figures: medians of ROUNDS; the portal as a ratio of the baseline and as seconds more (goal:
at most 10 s more); the hub container's memory after the rounds, at rest (cgroup usage less
its page cache, as `docker stats` shows it).

    python -m bench.b22_portal
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

import docker
import yaml
from selenium.webdriver.common.by import By

from bench.common import ROOT, invoke
from tests.browser import chromium, log_in, start_server, stop_server, wait_for
from tests.ports import published

ROUNDS = 5
USER, PASSWORD = "bench", "bench-Secret-1"


def _container(client: docker.DockerClient, project: str, service: str):
    labels = [f"com.docker.compose.project={project}", f"com.docker.compose.service={service}"]
    return client.containers.list(filters={"label": labels})[0]


def _jobs(login, user: str) -> list[str]:
    code, out = login.exec_run(["squeue", "-h", "-u", user, "-o", "%i %T"])
    assert code == 0, out
    return [line for line in out.decode().splitlines() if line.strip()]


def _until_no_jobs(login, user: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while _jobs(login, user):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{user}'s jobs did not end: {_jobs(login, user)}")
        time.sleep(0.5)


def sbatch_to_running(login, user: str) -> float:
    script = "sbatch --parsable -N1 -n1 -c1 --mem=1024M -t 60 --wrap 'sleep 600'"
    start = time.perf_counter()
    code, out = login.exec_run(["chroot", "/jail", "su", "-", user, "-c", script])
    job = out.decode().strip().split(";")[0]
    assert code == 0 and job.isdigit(), out
    while True:
        code, state = login.exec_run(["squeue", "-h", "-j", job, "-o", "%T"])
        if state.decode().strip() == "RUNNING":
            took = time.perf_counter() - start
            break
        time.sleep(0.05)
    login.exec_run(["scancel", job])
    _until_no_jobs(login, user)
    return took


def portal_to_lab(driver, portal, login) -> float:
    start = time.perf_counter()
    start_server(driver, portal)
    wait_for(driver, 60).until(
        lambda d: [c for c in d.find_elements(By.CSS_SELECTOR, ".jp-LauncherCard") if c.text]
    )
    took = time.perf_counter() - start
    stop_server(driver, portal.url)
    _until_no_jobs(login, USER)
    time.sleep(12)  # the hub's poll (10 s) sees the job gone before the next Start
    return took


def main() -> None:
    client = docker.from_env()
    with tempfile.TemporaryDirectory(prefix="b22-") as tmp:
        root = Path(tmp)
        data = yaml.safe_load((ROOT / "deploy" / "cluster.yaml").read_text())
        ports = published()
        port = ports["portal"]["port"]
        data.update(name="b22portal", **ports)
        data["portal"]["enabled"] = True
        (root / "layers").symlink_to(ROOT / "deploy" / "layers")
        path = root / "cluster.yaml"
        path.write_text(yaml.safe_dump(data))
        where = ["--cluster", str(path), "--out", str(root / "out")]
        os.environ["SLURMFORGE_STATE_DIR"] = str(root / "state")
        driver = None
        try:
            invoke("deploy", *where)
            login = _container(client, "b22portal", "login")
            for argv in (
                ["chroot", "/jail", "createuser", "--non-interactive", USER],
                ["bash", "-c", f"echo '{USER}:{PASSWORD}' | chroot /jail chpasswd"],
            ):
                code, out = login.exec_run(argv)
                assert code == 0, out

            class Portal:
                url = f"https://127.0.0.1:{port}"

            driver = chromium()
            log_in(driver, Portal, USER, PASSWORD)
            portal, baseline = [], []
            for _ in range(ROUNDS):
                baseline.append(sbatch_to_running(login, USER))
                portal.append(portal_to_lab(driver, Portal, login))
            time.sleep(10)
            stats = _container(client, "b22portal", "portal").stats(stream=False)
            memory = stats["memory_stats"]
            rest = memory["usage"] - memory.get("stats", {}).get("cache", 0)
        finally:
            if driver is not None:
                driver.quit()
            invoke("down", "--volumes", *where)
    p, b = statistics.median(portal), statistics.median(baseline)
    print(f"B22 portal, median of {ROUNDS} (one task, 1 CPU, 1024 MB):")
    print(f"  sbatch to RUNNING (baseline)        {b:6.2f} s  {[round(x, 2) for x in baseline]}")
    print(f"  Start to a usable JupyterLab        {p:6.2f} s  {[round(x, 2) for x in portal]}")
    print(f"  portal / baseline                   {p / b:6.1f}x  ({p - b:+.1f} s; goal <= +10 s)")
    print(f"  hub container's memory at rest      {rest / 2**20:6.0f} MiB")


if __name__ == "__main__":
    main()
