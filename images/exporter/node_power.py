"""node-power: starts and stops the elastic nodes of one local cluster when slurmctld asks.

slurmctld's ResumeProgram and SuspendProgram (power-resume, power-suspend in /etc/slurm) leave
one file per node in the request directory, named after the node and holding what is wanted
(`resume` or `suspend`); this agent takes each, checks the node against the list it was given
(NODE_POWER_NODES: this cluster's elastic nodes, nothing else), and starts or stops that node's
container, found by the labels Docker Compose gives it (project NODE_POWER_PROJECT, service =
the node). It is the only part of the cluster that reaches the Docker engine, and the only thing
it asks of it is to list, start and stop those containers. slurmctld holds no Docker socket.

On Kubernetes (NODE_POWER_ENGINE=kubernetes) it is a second container of slurmctld's pod,
sharing the request directory with it, and each elastic node is a Deployment of that name: it
sets the Deployment's scale to 1 or 0 through the API, with the token mounted into this
container alone, whose Role allows exactly that on those Deployments.

A request it cannot carry out (an unknown node, no container, the engine refusing) is logged and
dropped: Slurm marks the node down once its ResumeTimeout passes, with a reason sinfo -R shows.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import shutil
import socket
import ssl
import stat
import sys
import time
import urllib.parse

SPOOL = "/run/slurmforge/power"
SOCKET = os.environ.get("NODE_POWER_DOCKER", "/var/run/docker.sock")
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
ACTIONS = ("resume", "suspend")
STOP_SECONDS = 20  # slurmd ends at once on SIGTERM; then Docker kills what is left
POLL = 0.25


class Engine(http.client.HTTPConnection):
    """The Docker engine's API on its Unix socket."""

    def __init__(self, path: str) -> None:
        super().__init__("docker", timeout=60)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


def call(method: str, path: str) -> tuple[int, bytes]:
    engine = Engine(SOCKET)
    try:
        engine.request(method, path)
        response = engine.getresponse()
        return response.status, response.read()
    finally:
        engine.close()


def container(project: str, node: str) -> str | None:
    """The id of the node's container (created by deploy, running or not)."""
    labels = [f"com.docker.compose.project={project}", f"com.docker.compose.service={node}"]
    query = urllib.parse.urlencode({"all": "1", "filters": json.dumps({"label": labels})})
    status, body = call("GET", f"/containers/json?{query}")
    if status != 200:
        raise OSError(f"listing containers: HTTP {status} {body[:200]!r}")
    found = json.loads(body)
    return found[0]["Id"] if found else None


def act(project: str, action: str, node: str) -> str:
    ident = container(project, node)
    if ident is None:
        return "no container (deploy the cluster again)"
    if action == "resume":
        status, body = call("POST", f"/containers/{ident}/start")
    else:
        status, body = call("POST", f"/containers/{ident}/stop?t={STOP_SECONDS}")
    if status in (204, 304):  # done, or it already was
        return (
            "done" if status == 204 else f"already {'running' if action == 'resume' else 'stopped'}"
        )
    raise OSError(f"HTTP {status} {body[:200]!r}")


def kube_request(method: str, path: str, body: dict | None = None) -> tuple[int, bytes]:
    """One call to the Kubernetes API with the pod's token (renewed by the kubelet: read anew
    each time); ``path`` may hold ``{namespace}``, the pod's own."""
    with open(f"{TOKEN_DIR}/namespace", encoding="utf-8") as f:
        namespace = f.read().strip()
    with open(f"{TOKEN_DIR}/token", encoding="utf-8") as f:
        token = f.read().strip()
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = int(os.environ.get("KUBERNETES_SERVICE_PORT", "443"))
    tls = ssl.create_default_context(cafile=f"{TOKEN_DIR}/ca.crt")
    api = http.client.HTTPSConnection(host, port, context=tls, timeout=30)
    headers = {"Authorization": f"Bearer {token}"}
    if body is not None:
        headers["Content-Type"] = "application/merge-patch+json"
    try:
        api.request(
            method,
            path.format(namespace=namespace),
            body=None if body is None else json.dumps(body),
            headers=headers,
        )
        response = api.getresponse()
        return response.status, response.read()
    finally:
        api.close()


def kubernetes_act(action: str, node: str) -> str:
    """Scale the node's Deployment to 1 (resume) or 0 (suspend)."""
    path = f"/apis/apps/v1/namespaces/{{namespace}}/deployments/{node}/scale"
    status, answer = kube_request(
        "PATCH", path, {"spec": {"replicas": 1 if action == "resume" else 0}}
    )
    if status == 404:
        return "no Deployment (deploy the cluster again)"
    if status != 200:
        raise OSError(f"HTTP {status} {answer[:200]!r}")
    return "done"


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    print(f"{stamp} node-power: {message}", flush=True)


def take(name: str) -> str | None:
    """The request for node ``name``, removed from the directory (a request written meanwhile
    stays, for the next round)."""
    taking = os.path.join(SPOOL, f".{name}.taking")
    try:
        os.rename(os.path.join(SPOOL, name), taking)
    except FileNotFoundError:
        return None
    try:  # a plain file only: never a link followed, nor a FIFO that blocks the agent
        fd = os.open(taking, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        os.unlink(taking)
        log(f"request for {name} refused: cannot open it ({exc.strerror})")
        return None
    with os.fdopen(fd, "rb") as request:
        plain = stat.S_ISREG(os.fstat(fd).st_mode)
        action = request.read(64).decode(errors="replace").strip() if plain else ""
    os.unlink(taking)
    if not plain:
        log(f"request for {name} refused: not a plain file")
        return None
    return action


def main() -> None:
    project = os.environ["NODE_POWER_PROJECT"]
    allowed = set(filter(None, os.environ.get("NODE_POWER_NODES", "").split(",")))
    os.makedirs(SPOOL, exist_ok=True)
    # slurmctld's programs run as SlurmUser: the directory is that account's, open to no one
    # else. It outlives this container (a volume): on a restart, or in a container made again
    # (an upgrade, a changed definition), it is slurm's already, and this process may not change
    # the mode of a file it does not own (no FOWNER): the mode is set only where it is wrong,
    # the directory taken back to root first
    if stat.S_IMODE(os.stat(SPOOL).st_mode) != 0o700:
        os.chown(SPOOL, 0, 0)
        os.chmod(SPOOL, 0o700)
    shutil.chown(SPOOL, "slurm", "slurm")
    if os.environ.get("NODE_POWER_ENGINE") == "kubernetes":
        carry_out = kubernetes_act
    else:
        carry_out = functools.partial(act, project)
    log(f"ready: {len(allowed)} nodes of cluster {project} ({', '.join(sorted(allowed))})")
    while True:
        for name in sorted(os.listdir(SPOOL)):
            if name.startswith("."):
                continue
            action = take(name)
            if action is None:
                continue
            if name not in allowed or action not in ACTIONS:
                log(f"refused {action!r} for {name!r}: not an elastic node of {project}")
                continue
            try:
                log(f"{action} {name}: {carry_out(action, name)}")
            except OSError as exc:
                log(f"{action} {name} failed: {exc}")
        time.sleep(POLL)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(0)
