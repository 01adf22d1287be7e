"""GPU nodes on the local target, with a synthetic driver root as the "host" (this machine has no
GPU; tests/driver_root.py says what is real in it): driver files read-only in the workers and in
the jail, the jail's shared ld cache under concurrent workers, CPU nodes untouched, and the GPU
health check draining and resuming nodes through the real Slurm."""

from __future__ import annotations

import shlex
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests import driver_root
from tests.cluster.deployed import Clusters, Deployed, write_cluster
from tests.common import ROOT, dump_yaml, load_yaml
from tests.ports import free_port

V = driver_root.VERSION
HEALTH_INTERVAL = 5  # seconds between each node's health checks: the last test waits on them
LIB = "/usr/local/nvidia/lib64"
GPU_NODES = ("trainer-0", "trainer-1", "trainer-2")
DUAL = "dual-0"  # a node with two GPUs (the host's nvidia3 and nvidia4)
NCCL = "/jail/opt/user/nccl"  # fixtures, as the login node sees the jail
SONAMES = (*driver_root.LIBRARIES.values(), "libcudart.so.12", "libnccl.so.2")


@pytest.fixture(scope="module")
def gpu(images: dict[str, str], clusters: Clusters) -> Deployed:
    root = clusters.root("gpucluster")
    host = driver_root.make(root / "host", gpus=6)
    cluster = clusters.deploy(
        "sfgpu",
        root,
        gpu={"driver_root": str(host), "min_busbw": 100.0},
        health={"interval": HEALTH_INTERVAL},
        nodesets=[
            {"name": "cpu", "definitions": ["cpu-small"], "replicas": 1},
            # three workers start at once against one jail; small enough for this machine
            {
                "name": "trainer",
                "definitions": ["gpu"],
                "replicas": 3,
                "cpus": 1,
                "memory_mb": 1024,
            },
            # written out whole: the gpu layer's gpu:1 would be united with its gpu:2
            {
                "name": "dual",
                "image": "worker",
                "replicas": 1,
                "cpus": 2,
                "memory_mb": 1024,
                "features": ["gpu"],
                "gres": ["gpu:2"],
                "capabilities": ["SYS_ADMIN"],
            },
        ],
        partitions=[
            {"name": "main", "nodesets": ["cpu"], "default": True},
            {"name": "gpu", "nodesets": ["trainer", "dual"]},
        ],
    )
    return cluster


def _job(gpu: Deployed, node: str, command: str) -> tuple[int, str]:
    """``command`` as a job step on ``node`` (inside the jail), submitted from the login node."""
    part = "main" if node.startswith("cpu") else "gpu"
    # -Q: no "queued and waiting" lines in the output while the node finishes the previous job
    return gpu.sh(
        "login", f"srun -Q -p {part} -N1 -w {node} bash -c {shlex.quote(command)}", user="root"
    )


def test_nodes_come_up_with_their_own_gpus(gpu: Deployed) -> None:
    assert gpu.states() == {"cpu-0": "idle", DUAL: "idle", **{n: "idle" for n in GPU_NODES}}
    gres = gpu.ok("slurmctld", "cat /etc/slurm/gres.conf")
    for i, node in enumerate(GPU_NODES):
        assert f"NodeName={node} Name=gpu File=/dev/nvidia{i}" in gres
        devices = gpu.ok(node, "ls /dev | grep -E '^nvidia[0-9]+$'").split()
        assert devices == [f"nvidia{i}"]  # its own GPU only
        assert gpu.ok(node, "test -c /dev/nvidiactl && echo yes") == "yes"


def test_driver_files_are_read_only_in_the_worker(gpu: Deployed) -> None:
    listing = gpu.ok("trainer-0", f"ls {LIB}").split()
    assert f"libcuda.so.{V}" in listing and "libcuda.so.1" in listing  # + the SONAME link
    assert not any(driver_root.OLD_VERSION in f for f in listing)  # leftovers never mounted
    code, out = gpu.sh("trainer-0", f"echo x >> {LIB}/libcuda.so.{V}")
    assert code != 0 and "Read-only file system" in out
    assert gpu.ok("trainer-0", "nvidia-smi").startswith("GPU 0: Stand-in GPU")


def test_a_job_in_the_jail_sees_the_driver_read_only(gpu: Deployed) -> None:
    probe = (
        "test -r /etc/slurmforge-jail-release && echo in-jail; "
        f"ls {LIB}/libcuda.so.{V}; "
        "ldconfig -p | grep -F 'libcuda.so.1 ('; "
        f"echo x >> {LIB}/libcuda.so.{V} 2>&1 || true; "
        f"touch {LIB}/new 2>&1 || true; "
        "python3 -c 'import ctypes; v=ctypes.c_int(); "
        'ctypes.CDLL("libcuda.so.1").cuDriverGetVersion(ctypes.byref(v)); print("api", v.value)\'; '
        "mount | grep -F ' /usr/local/nvidia/lib64/libcuda.so' | head -1"
    )
    code, out = _job(gpu, "trainer-1", probe)
    assert code == 0, out
    assert "in-jail" in out
    assert f"libcuda.so.1 (libc6,x86-64) => {LIB}/libcuda.so.1" in out
    assert out.count("Read-only file system") == 2, out
    assert f"api {driver_root.CUDA_DRIVER_API}" in out
    mount = out.splitlines()[-1]
    assert "ro," in mount and "nosuid" in mount and "nodev" in mount, mount


def _cache_is_whole(gpu: Deployed) -> None:
    # as every node's jobs see it: every library resolves, through a non-empty file
    for node in GPU_NODES:
        code, out = _job(gpu, node, "ldconfig -p")
        assert code == 0, out
        for soname in SONAMES:
            assert f"\t{soname} (" in out, (node, soname)
        sizes = _job(gpu, node, f"stat -L -c '%s %n' {LIB}/*")[1].splitlines()
        assert sizes and all(int(line.split()[0]) > 0 for line in sizes), sizes
    # on the shared volume itself (the login node has no projection): nothing was created for the
    # driver, no candidate cache was left behind (beside the cache, which /etc/ld.so.cache
    # links to), and the cache is not empty
    assert gpu.ok("login", "find /jail/usr/local/nvidia -mindepth 1 ! -type d | wc -l") == "0"
    cache = gpu.ok("login", "readlink -f /jail/etc/ld.so.cache")
    assert cache == "/jail/usr/lib/slurmforge/ld.so.cache"
    assert (
        gpu.ok(
            "login", "ls -A /jail/etc /jail/usr/lib/slurmforge | grep -c '^.ld.so.cache.' || true"
        )
        == "0"
    )
    assert int(gpu.ok("login", f"stat -c %s {cache}")) > 0


def test_three_workers_started_at_once_leave_a_whole_ld_cache(gpu: Deployed) -> None:
    _cache_is_whole(gpu)


def test_restarting_workers_together_does_not_rewrite_the_cache(gpu: Deployed) -> None:
    before = gpu.ok("login", "stat -L -c '%i %Y' /jail/etc/ld.so.cache")
    containers = [gpu.container(n) for n in GPU_NODES]
    # what each said before the restart (`logs(since=)` counts whole seconds: a worker started
    # by the deploy a second before would be counted as restarted twice)
    said = [len(c.logs()) for c in containers]
    threads = [threading.Thread(target=c.restart, kwargs={"timeout": 5}) for c in containers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # each worker's entrypoint says what it did with the cache before slurmd starts
    deadline = time.monotonic() + 60
    while True:
        logs = [c.logs()[n:].decode() for c, n in zip(containers, said, strict=True)]
        ours = [
            [ln for ln in log.splitlines() if ln.startswith("project-driver: jail")] for log in logs
        ]
        if all(ours) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert all(o == ["project-driver: jail ld cache already up to date"] for o in ours), ours
    gpu.wait_states({n: "idle" for n in GPU_NODES})
    assert gpu.ok("login", "stat -L -c '%i %Y' /jail/etc/ld.so.cache") == before
    _cache_is_whole(gpu)


def test_cpu_nodes_get_no_driver(gpu: Deployed) -> None:
    assert gpu.ok("cpu-0", "ls /dev | grep -c nvidia || true") == "0"
    assert gpu.ok("cpu-0", "test -e /usr/local/nvidia && echo has || echo none") == "none"
    code, out = _job(gpu, "cpu-0", f"ls -A {LIB} | wc -l")
    assert code == 0 and out.strip() == "0", out


# open(2) of a stand-in GPU: the device cgroup lets a job reach only the GPUs it was given
# (EPERM for the others); behind a device it may open there is no driver here (ENXIO)
OPEN_GPUS = (
    "python3 -c 'import errno, glob, os\n"
    'for d in sorted(glob.glob("/dev/nvidia[0-9]*")):\n'
    '    try: os.close(os.open(d, os.O_RDWR)); print(d, "opened")\n'
    "    except OSError as e: print(d, errno.errorcode[e.errno])'; "
    "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"
)


def test_a_job_given_one_gpu_can_open_only_that_one(gpu: Deployed) -> None:
    assert gpu.ok(DUAL, "ls /dev | grep -E '^nvidia[0-9]+$'").split() == ["nvidia3", "nvidia4"]
    for gres, expect in (
        ("gpu:1", {"/dev/nvidia3": "ENXIO", "/dev/nvidia4": "EPERM"}),
        ("gpu:2", {"/dev/nvidia3": "ENXIO", "/dev/nvidia4": "ENXIO"}),
    ):
        code, out = gpu.sh(
            "login",
            f"srun -Q -p gpu -w {DUAL} --gres={gres} bash -c {shlex.quote(OPEN_GPUS)}",
            user="root",
        )
        assert code == 0, out
        lines = out.splitlines()
        assert dict(line.split() for line in lines[:-1]) == expect, out
        # Slurm numbers the job's GPUs from 0, as it always does
        assert lines[-1] == (
            "CUDA_VISIBLE_DEVICES=0" if gres == "gpu:1" else "CUDA_VISIBLE_DEVICES=0,1"
        )
    # without --gres a job gets no GPU at all
    code, out = gpu.sh(
        "login", f"srun -Q -p gpu -w {DUAL} bash -c {shlex.quote(OPEN_GPUS)}", user="root"
    )
    assert code == 0 and "opened" not in out and out.count("EPERM") == 2, out


def test_gpu_check_drains_slow_nodes_and_resumes_them_when_they_pass(gpu: Deployed) -> None:
    fixtures = ROOT / "tests" / "fixtures" / "nccl"
    for name in ("all_reduce_v2.txt", "all_reduce_old_error_column.txt"):
        text = (fixtures / name).read_text()
        gpu.ok("login", f"mkdir -p {NCCL} && cat > {NCCL}/{name} << 'EOF'\n{text}EOF")
    # someone else's drain is left alone
    gpu.ok("slurmctld", "scontrol update NodeName=trainer-2 State=DRAIN Reason='disk check'")
    slow = gpu.invoke(
        "gpu-check", "--command", "cat /opt/user/nccl/all_reduce_old_error_column.txt"
    )
    assert slow.returncode == 0, slow.stdout + slow.stderr
    rows = {ln.split()[0]: ln.split()[1] for ln in slow.stdout.splitlines()[2:]}
    assert rows == {
        "trainer-0": "drained",
        "trainer-1": "drained",
        "trainer-2": "skipped",
        DUAL: "drained",
    }
    reasons = gpu.ok("slurmctld", "sinfo -h -N -n trainer-0,trainer-1 -o '%N %t %E'")
    assert reasons.count("slurmforge-gpu-check: busbw 22.77 GB/s < 100") == 2, slow.stdout
    fast = gpu.invoke("gpu-check", "--command", "cat /opt/user/nccl/all_reduce_v2.txt")
    assert fast.returncode == 0, fast.stdout + fast.stderr
    assert "resumed" in fast.stdout
    gpu.wait_states(
        {"trainer-0": "idle", "trainer-1": "idle", "trainer-2": "drain", DUAL: "idle"}, timeout=30
    )
    assert "slurmforge-gpu-check" not in gpu.ok("slurmctld", "scontrol show res 2>&1 || true")
    gpu.ok("slurmctld", "scontrol update NodeName=trainer-2 State=RESUME")


def test_gpu_node_set_without_a_driver_is_refused(gpu: Deployed, tmp_path: Path) -> None:
    name = f"sfnogpu{uuid.uuid4().hex[:4]}"
    write_cluster(
        tmp_path,
        name,
        free_port(),
        gpu={"driver_root": str(tmp_path)},  # no driver here: CPU mode
        nodesets=[{"name": "trainers", "definitions": ["gpu"], "replicas": 1}],
        partitions=[{"name": "p", "nodesets": ["trainers"]}],
    )
    refused = Deployed(name, tmp_path, gpu.env, gpu.client)
    proc = refused.invoke("deploy")
    assert proc.returncode == 2, proc.stderr
    first = proc.stderr.splitlines()[0]
    assert "'trainers' requests GPUs" in first and "no NVIDIA driver" in first, proc.stderr
    assert "Traceback" not in proc.stderr
    assert (
        gpu.client.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={name}"}
        )
        == []
    )


def test_scaling_past_the_hosts_gpus_is_refused_and_changes_nothing(gpu: Deployed) -> None:
    proc = gpu.invoke("scale", "trainer=5")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    first = proc.stderr.splitlines()[0]
    assert "need 7 GPUs" in first and "has 6" in first, proc.stderr  # 5 trainers + dual's 2
    # the stored count and the running cluster are as before: a redeploy changes nothing
    assert gpu.invoke("deploy").returncode == 0
    assert sorted(n for n in gpu.states() if n.startswith("trainer")) == list(GPU_NODES)


def test_gpu_nodes_whose_driver_is_older_than_the_cluster_takes_drain_and_come_back(
    gpu: Deployed,
) -> None:
    """The node health check's GPU part, on the stand-in driver: a cluster file that asks for a
    newer driver than the host's drains every GPU node (each still has its GPUs), leaves the CPU
    node alone, and the GPU nodes are back in service once the file asks for less again."""
    data = load_yaml(gpu.cluster_file.read_text())
    gpu_nodes = [*GPU_NODES, DUAL]

    def nodes() -> dict[str, tuple[str, str]]:
        out = gpu.ok("slurmctld", "sinfo -h -N -o '%N|%t|%E'")
        return {n: (t, r) for n, t, r in (line.split("|", 2) for line in out.splitlines())}

    def wait(want, what: str) -> dict[str, tuple[str, str]]:
        deadline = time.monotonic() + 12 * HEALTH_INTERVAL
        while not want(seen := nodes()):
            assert time.monotonic() < deadline, f"{what}: {seen}"
            time.sleep(1)
        return seen

    try:
        data["health"] = {"interval": HEALTH_INTERVAL, "min_driver": "550.54.15"}
        gpu.cluster_file.write_text(dump_yaml(data, sort_keys=False))
        assert gpu.invoke("deploy").returncode == 0
        reason = f"health: driver {V} older than 550.54.15"
        seen = wait(
            lambda s: all(s[n] == ("drain", reason) for n in gpu_nodes), "GPU nodes drained"
        )
        assert seen["cpu-0"] == ("idle", "none"), seen
    finally:
        data["health"] = {"interval": HEALTH_INTERVAL}
        gpu.cluster_file.write_text(dump_yaml(data, sort_keys=False))
        assert gpu.invoke("deploy").returncode == 0
    wait(lambda s: all(s[n][0] == "idle" for n in gpu_nodes), "GPU nodes back in service")
