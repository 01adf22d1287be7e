"""Why a deploy's wait did not end: for each of the cluster's pods that is not ready, the one
reason Kubernetes gives (not scheduled and why, an image it cannot pull, a container that
exits, an init container still waiting, a pod still terminating), and the last lines of a
container that failed, so a timed-out deploy names what it waited on instead of only
``timed out waiting for the condition``."""

from __future__ import annotations

from typing import Any

from slurmforge.deploy.k8s.kubectl import Kubectl
from slurmforge.errors import DeployError

TAIL = 5  # log lines shown of a container that exited non-zero


def _container(kind: str, status: dict[str, Any]) -> tuple[str, list[str] | None] | None:
    """What holds one container, and where it exited non-zero the ``kubectl logs`` flags that
    show why ([] for this run's log, ["--previous"] for the run before a restart)."""
    name = f"{kind} {status['name']}"
    state = status.get("state", {})
    if "waiting" in state:
        waiting = state["waiting"]
        last = status.get("lastState", {}).get("terminated")
        after = f" (last exit {last.get('exitCode')})" if last else ""
        message = f": {waiting['message']}" if waiting.get("message") else ""
        line = f"{name}: {waiting.get('reason', 'waiting')}{after}{message}"
        return line, ["--previous"] if last else None
    if "terminated" in state:
        code = state["terminated"].get("exitCode", 0)
        if code:
            return f"{name}: exited {code} ({state['terminated'].get('reason', '')})", []
        return None
    if kind == "init container":  # running: the pod waits on it
        return f"{name}: still running", None
    if not status.get("ready"):
        return f"{name}: running, not ready", None
    return None


def holding(pod: dict[str, Any]) -> tuple[str, list[str]] | None:
    """One line for a pod that is not ready or a Job's pod still running (None for a ready
    or finished one), and the ``kubectl logs`` arguments after the pod's name that show why
    ([] where no log says)."""
    name = pod["metadata"]["name"]
    status = pod.get("status", {})
    if pod["metadata"].get("deletionTimestamp"):
        return f"{name}: terminating", []
    if status.get("phase") == "Succeeded":
        return None
    for condition in status.get("conditions", []):
        if condition["type"] == "PodScheduled" and condition["status"] == "False":
            why = condition.get("message") or condition.get("reason", "")
            return f"{name}: not scheduled: {why}", []
    for kind, key in (("init container", "initContainerStatuses"),
                      ("container", "containerStatuses")):  # fmt: skip
        for container in status.get(key, []):
            found = _container(kind, container)
            if found:
                line, flags = found
                logs = [] if flags is None else ["-c", container["name"], f"--tail={TAIL}", *flags]
                return f"{name}: {line}", logs
    if status.get("phase") != "Running":
        return f"{name}: {status.get('phase', 'Unknown')}", []
    owners = {o.get("kind") for o in pod["metadata"].get("ownerReferences", [])}
    if "Job" in owners:  # a Job's pod is waited for until it ends
        return f"{name}: running since {status.get('startTime', '?')}", []
    return None


def explain(k: Kubectl) -> list[str]:
    """The lines `holding` gives for every pod of the cluster, each failed container's log
    tail under its pod's line; nothing where listing the pods fails too."""
    try:
        pods = k.get("pods")
    except DeployError:
        return []
    lines = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        found = holding(pod)
        if not found:
            continue
        line, logs = found
        lines.append(line)
        if logs:
            proc = k.run(k.argv("logs", pod["metadata"]["name"], *logs))
            lines += [f"  | {ln}" for ln in proc.stdout.splitlines()[-TAIL:]]
    return lines


def wait(k: Kubectl, argv: list[str], what: str) -> None:
    """``k.check``, and on failure the error says which pods it waited on and why."""
    try:
        k.check(argv, what)
    except DeployError as e:
        lines = explain(k)
        if not lines:
            raise
        shown = "".join(f"\n  {ln}" for ln in lines)
        raise DeployError(f"{e}\n  pods not ready:{shown}") from None
