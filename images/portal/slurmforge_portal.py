"""The web portal's glue to JupyterHub: PAM logins with a backoff after failures, and
batchspawner's SlurmSpawner with a start form bounded by the cluster's partitions.

The cluster's settings come from the deploy's generated portal.yaml (slurmforge/deploy/portal.py);
jupyterhub_config.py beside this module hands them to ``configure``.
"""

from __future__ import annotations

import asyncio
import html
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from batchspawner import SlurmSpawner
from jupyterhub.auth import PAMAuthenticator
from tornado import web

# Failed logins: a name may fail FAILURES times from one address within WINDOW seconds, and an
# address ADDRESS_FAILURES times whatever the names; past either, logins from that address (for
# that name, or for any) are refused for BACKOFF seconds after its last failure. Keyed by address
# too, so that nobody locks a user out by failing as her from elsewhere, and one password tried
# across many names is slowed as well. Every refusal takes at least REFUSAL_SECONDS, a refused
# password and a throttled login alike, so that the answer's time does not say which it was.
FAILURES, ADDRESS_FAILURES, WINDOW, BACKOFF = 5, 20, 300, 60
REFUSAL_SECONDS = 3.0
MAX_TRACKED = 10000  # (name, address) pairs kept before those with no recent failure are dropped
# the start options the form has (and the REST API may send): any other is refused
START_OPTIONS = ("partition", "cpus", "memory_mb", "minutes", "gpus")


def client_address(request: Any) -> str:
    """The address a login came from. The hub's proxy runs beside it in this container and adds
    the address it was reached from as the last entry of X-Forwarded-For: that entry is taken
    from the proxy alone. Otherwise the connection's own peer; a header a client sent (tornado's
    xheaders also believe X-Real-Ip) never decides it."""
    context = request.connection.context
    peer = getattr(context, "_orig_remote_ip", None) or request.remote_ip or "unknown"
    try:
        local = request.connection.stream.socket.getsockname()[0]
    except (AttributeError, OSError):
        local = ""
    forwarded = request.headers.get("X-Forwarded-For", "")
    if forwarded and peer in (local, "127.0.0.1", "::1"):
        return forwarded.split(",")[-1].strip() or peer
    return peer


class ThrottledPAMAuthenticator(PAMAuthenticator):
    """PAM (the node's: the jail's users, and a directory's through SSSD), throttled by name and
    source address as FAILURES above says, every refusal answered after the same delay."""

    _failures: ClassVar[dict[tuple[str, str], list[float]]] = {}

    def normalize_username(self, username: str) -> str:
        """The name exactly as PAM is given it. JupyterHub's default lower-cases it after PAM
        accepted the typed one, and SSSD, sudo and Slurm tell `Bob` from `bob`: a directory
        user `Bob` who logged in with his own password got `bob`'s server and jobs."""
        return self.username_map.get(username, username)

    def _recent(self, key: tuple[str, str], now: float) -> list[float]:
        recent = [t for t in self._failures.get(key, []) if now - t < WINDOW]
        if recent:
            self._failures[key] = recent
        else:
            self._failures.pop(key, None)
        return recent

    def _throttled(self, name: str, address: str, now: float) -> str:
        """Why a login of name from address is refused without asking PAM ('' when it is not)."""
        for key, most, who in (
            (("", address), ADDRESS_FAILURES, f"{address} (any name)"),
            ((name, address), FAILURES, f"{name} from {address}"),
        ):
            recent = self._recent(key, now)
            if len(recent) >= most and now - recent[-1] < BACKOFF:
                return f"portal: {who}: {len(recent)} failed logins; refused for now"
        return ""

    async def authenticate(self, handler: web.RequestHandler, data: dict[str, str]) -> Any:
        name = self.normalize_username(data.get("username", ""))
        address = client_address(handler.request)
        now = time.monotonic()
        if len(self._failures) > MAX_TRACKED:
            for key in list(self._failures):
                self._recent(key, now)
        why = self._throttled(name, address, now)
        user = None
        if why:
            self.log.warning(why)
        else:
            user = await super().authenticate(handler, data)
        if user is None:
            for key in ((name, address), ("", address)):
                self._failures[key] = [*self._recent(key, now), now]
            await asyncio.sleep(max(0.0, REFUSAL_SECONDS - (time.monotonic() - now)))
        else:
            self._failures.pop((name, address), None)
        return user


def _form_row(label: str, field: str) -> str:
    return f'<div class="form-group"><label>{html.escape(label)}</label>{field}</div>'


def _number(name: str, value: int, low: int, high: int, step: int = 1) -> str:
    return (
        f'<input class="form-control" type="number" name="{name}" id="{name}" value="{value}" '
        f'min="{low}" max="{high}" step="{step}" required>'
    )


class PortalSpawner(SlurmSpawner):
    """A notebook server as the user's Slurm job: the form's partition, CPUs, memory, time limit
    and GPUs, each checked against what the partition's node sets have before sbatch."""

    settings: ClassVar[dict[str, Any]] = {}  # configure() sets them

    def _limits(self, partition: str) -> dict[str, int]:
        return self.settings["partitions"][partition]

    def form_html(self) -> str:
        form = self.settings["form"]
        options = "".join(
            f'<option value="{html.escape(name)}"'
            f"{' selected' if name == form['partition'] else ''}>"
            f"{html.escape(name)} (up to {lim['cpus']} CPUs, {lim['memory_mb']} MB"
            f"{', ' + str(lim['gpus']) + ' GPUs' if lim['gpus'] else ''})</option>"
            for name, lim in self.settings["partitions"].items()
        )
        most = {
            k: max(lim[k] for lim in self.settings["partitions"].values())
            for k in ("cpus", "memory_mb", "gpus")
        }
        rows = [
            _form_row(
                "Partition",
                f'<select class="form-control" name="partition" id="partition">{options}</select>',
            ),
            _form_row("CPUs", _number("cpus", form["cpus"], 1, most["cpus"])),
            _form_row(
                "Memory (MB)", _number("memory_mb", form["memory_mb"], 64, most["memory_mb"])
            ),
            _form_row("Time limit (minutes)", _number("minutes", form["time"] // 60, 1, 525600)),
        ]
        if most["gpus"]:
            rows.append(_form_row("GPUs", _number("gpus", form["gpus"], 0, most["gpus"])))
        return "\n".join(rows)

    def options_from_form(self, formdata: dict[str, list[str]]) -> dict[str, Any]:
        def one(key: str, default: str = "") -> str:
            return (formdata.get(key) or [default])[0].strip()

        try:
            return {
                "partition": one("partition"),
                "cpus": int(one("cpus")),
                "memory_mb": int(one("memory_mb")),
                "minutes": int(one("minutes")),
                "gpus": int(one("gpus", "0")),
            }
        except ValueError:
            why = "CPUs, memory, time limit and GPUs are whole numbers"
            raise web.HTTPError(400, why) from None

    def _checked(self, options: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(options) - set(START_OPTIONS))
        if unknown:
            raise web.HTTPError(
                400, f"unknown start options {unknown}: expected {', '.join(START_OPTIONS)}"
            )
        partition = options.get("partition", "")
        if not all(
            isinstance(options.get(k), int) for k in ("cpus", "memory_mb", "gpus", "minutes")
        ):
            raise web.HTTPError(400, "CPUs, memory, time limit and GPUs are whole numbers")
        if partition not in self.settings["partitions"]:
            raise web.HTTPError(400, f"no partition {partition!r}")
        most = self._limits(partition)
        for key, low in (("cpus", 1), ("memory_mb", 64), ("gpus", 0)):
            if not low <= options[key] <= most[key]:
                raise web.HTTPError(
                    400, f"{key}: {options[key]} is not within {low} and {most[key]} on {partition}"
                )
        if options["minutes"] < 1:
            raise web.HTTPError(400, "the time limit is at least one minute")
        return options

    def apply_options(self, user_options: dict[str, Any]) -> None:
        """JupyterHub's apply_user_options hook: the form's choices (its defaults when a start
        names none, as one through the REST API may), checked, as the job's request."""
        form = self.settings["form"]
        defaults = {k: v for k, v in form.items() if k != "time"}
        defaults["minutes"] = math.ceil(form["time"] / 60)
        options = self._checked({**defaults, **(user_options or {})})
        # batchspawner puts user_options into the batch script's variables too: only these
        self.user_options = options
        self.req_partition = options["partition"]
        self.req_nprocs = str(options["cpus"])
        self.req_memory = f"{options['memory_mb']}M"
        self.req_runtime = str(options["minutes"])
        self.req_gres = f"gpu:{options['gpus']}" if options["gpus"] else ""

    async def run_command(
        self, cmd: str, input: str | None = None, env: dict[str, str] | None = None
    ) -> str:
        """A command's output, as batchspawner's; but one cut short (the hub stopping while a
        poll runs it) ends the caller too. batchspawner's killed it and returned nothing, a poll
        took that for a job that is gone, and the hub, in its last second, dropped a running
        server: the restarted hub no longer knew it, and its job ran on."""
        proc = await asyncio.create_subprocess_shell(
            cmd,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await proc.communicate(input.encode() if input else None)
        except BaseException:
            proc.kill()
            raise
        if proc.returncode != 0:
            said = err.decode().strip()
            self.log.error("%s exited %s: %s", cmd, proc.returncode, said)
            raise RuntimeError(said)  # its stderr: the caller reads Slurm's message in it
        return out.decode().strip()

    async def submit_batch_script(self) -> str:
        """sbatch's own refusal (no association with an account, a limit) as the hub's message."""
        try:
            return await super().submit_batch_script()
        except RuntimeError as exc:
            lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
            said = [ln.removeprefix("sbatch: error: ") for ln in lines if "error:" in ln]
            why = f"Slurm refused the job: {'; '.join(said or lines[-1:]) or 'sbatch failed'}"
            refused = web.HTTPError(500, why)
            # what the hub shows on the "Spawn failed" page too, when the refusal came before
            # the start page's progress stream could show it (the hub shows an exception's
            # message there only when it carries this attribute)
            refused.jupyterhub_message = why
            raise refused from None

    async def progress(self) -> Any:
        while True:
            if self.state_ispending():
                reason = " ".join(self.job_status.split()[1:-1])  # '%T %r %B' (batch_query_cmd)
                yield {"message": f"Slurm job {self.job_id} is pending ({reason or 'queued'})"}
            elif self.state_isrunning():
                host = self.state_gethost()
                yield {"message": f"Slurm job {self.job_id} runs on {host}: starting JupyterLab"}
            else:
                yield {"message": f"Slurm job {self.job_id}: {self.job_status or 'submitting'}"}
            await asyncio.sleep(1)


BATCH_SCRIPT = """#!/bin/bash
#SBATCH --job-name=jupyterlab
#SBATCH --output={{homedir}}/.jupyterlab-%j.log
#SBATCH --chdir={{homedir}}
#SBATCH --export={{keepvars}}
#SBATCH --nodes=1
#SBATCH --ntasks=1
{% if partition %}#SBATCH --partition={{partition}}
{% endif %}{% if runtime %}#SBATCH --time={{runtime}}
{% endif %}{% if memory %}#SBATCH --mem={{memory}}
{% endif %}{% if gres %}#SBATCH --gres={{gres}}
{% endif %}{% if nprocs %}#SBATCH --cpus-per-task={{nprocs}}
{% endif %}
export PATH=/usr/local/bin:/usr/bin:/bin SHELL=${SHELL:-/bin/bash}
{{cmd}}
"""


def configure(c: Any, settings: dict[str, Any]) -> None:
    """The hub's configuration from the deploy's settings (portal.yaml)."""
    secrets = Path(os.environ.get("SLURMFORGE_SECRETS_DIR", "/run/secrets"))
    jupyter = settings["jupyter"]
    idle = int(settings["idle_timeout"])

    # TLS on the published port, with the deploy's certificate (portal.tls_pem, or one made at
    # the first deploy); the hub's own API (notebook servers call it) stays inside the cluster
    tls = Path(os.environ.get("PORTAL_TLS_FILE", str(secrets / "portal-tls.pem")))
    if tls.is_file():
        c.JupyterHub.bind_url = "https://0.0.0.0:8000"
        c.JupyterHub.ssl_cert = c.JupyterHub.ssl_key = str(tls)
    else:
        c.JupyterHub.bind_url = "http://0.0.0.0:8000"
    c.JupyterHub.hub_bind_url = "http://0.0.0.0:8081"
    c.JupyterHub.hub_connect_url = f"http://{settings['hub_host']}:8081"
    c.JupyterHub.db_url = "sqlite:////var/lib/jupyterhub/jupyterhub.sqlite"
    c.JupyterHub.pid_file = "/var/lib/jupyterhub/jupyterhub.pid"
    cookie = os.environ.get("PORTAL_COOKIE_SECRET_FILE", str(secrets / "portal-cookie-secret"))
    c.JupyterHub.cookie_secret = Path(cookie).read_bytes()
    token = os.environ.get("PORTAL_PROXY_TOKEN_FILE", str(secrets / "portal-proxy-token"))
    c.ConfigurableHTTPProxy.auth_token = Path(token).read_text().strip()
    c.ConfigurableHTTPProxy.pid_file = "/var/lib/jupyterhub/proxy.pid"
    # servers are Slurm jobs: a restarted hub finds them again in its database
    c.JupyterHub.cleanup_servers = False
    # /hub/metrics answers the cluster's Prometheus alone, which presents the metrics token as
    # a service's API token (its one scope: read:metrics); the series name users
    c.JupyterHub.authenticate_prometheus = True
    metrics = Path(os.environ.get("METRICS_TOKEN_FILE", str(secrets / "metrics-token")))
    services: list[dict[str, Any]] = []
    roles: list[dict[str, Any]] = []
    if metrics.is_file():
        services.append({"name": "prometheus", "api_token": metrics.read_text().strip()})
        roles.append({"name": "metrics", "scopes": ["read:metrics"], "services": ["prometheus"]})
    # the session cookies go with requests from the hub's own pages and top-level links only,
    # and over TLS only (tornado's set_cookie arguments)
    cookies = {"samesite": "Lax", **({"secure": True} if tls.is_file() else {})}
    c.JupyterHub.tornado_settings = {"cookie_options": cookies}

    c.JupyterHub.authenticator_class = ThrottledPAMAuthenticator
    c.Authenticator.allow_all = True  # whoever PAM lets in: the cluster's users
    # a Unix user name and nothing else: the name reaches sudo's command line (exec_prefix);
    # a directory's may hold capitals, kept as they are (normalize_username)
    c.Authenticator.username_pattern = r"^[A-Za-z_][A-Za-z0-9_.-]{0,31}$"
    c.PAMAuthenticator.service = "jupyterhub"  # images/portal/pam-jupyterhub
    c.PAMAuthenticator.open_sessions = True  # pam_mkhomedir: a directory user's first home

    PortalSpawner.settings = settings
    c.JupyterHub.spawner_class = PortalSpawner
    c.PortalSpawner.options_form = PortalSpawner.form_html  # called with the spawner
    c.PortalSpawner.apply_user_options = PortalSpawner.apply_options  # (spawner, options)
    # the pending reason before the batch host (progress shows it; the host is the last word)
    c.PortalSpawner.batch_query_cmd = "squeue -h -j {job_id} -o '%T %r %B'"
    # a query Slurm did not answer (munge refusing, the controller restarting or timing out)
    # is no news of the job: batchspawner counts two of Slurm's messages as such and takes any
    # other for a job that is gone, and the hub then dropped a running server and left its job
    # running. Gone is a job squeue lists in an ended state, or not at all, or whose ID it says
    # it does not know.
    c.PortalSpawner.state_unknown_re = r"(?s)^(?![A-Z_]+ )(?!.*Invalid job id specified)."
    if settings.get("node_domain"):  # the node's name as the hub's proxy resolves it
        c.PortalSpawner.state_exechost_exp = rf"\1.{settings['node_domain']}"
    # as the user; from /tmp, a directory the jail plugin takes submissions from (it refuses the
    # hub's own, which no node has: the script names the job's directory and output file); with
    # the sessions' umask, which sbatch hands to the job (sudo keeps the stricter of it and its own)
    umask = settings.get("umask", "0077")
    c.PortalSpawner.exec_prefix = f"cd /tmp && umask {umask} && sudo -E -u {{username}}"
    c.PortalSpawner.batch_script = BATCH_SCRIPT
    c.PortalSpawner.req_srun = ""
    c.PortalSpawner.batchspawner_singleuser_cmd = f"{jupyter}/batchspawner-singleuser"
    c.PortalSpawner.cmd = [f"{jupyter}/jupyterhub-singleuser"]
    c.PortalSpawner.env_keep = ["LANG", "LC_ALL"]
    c.PortalSpawner.default_url = "/lab"
    c.PortalSpawner.start_timeout = int(settings["start_timeout"])
    c.PortalSpawner.http_timeout = 120
    c.PortalSpawner.poll_interval = 10  # a job Slurm ended shows as stopped within this
    c.PortalSpawner.startup_poll_interval = 1.0

    if idle:
        # activity reaches the hub often enough for the culler to see it within the timeout
        every = min(300, max(10, idle // 4))
        c.JupyterHub.last_activity_interval = every
        c.PortalSpawner.environment = {"JUPYTERHUB_ACTIVITY_INTERVAL": str(every)}
        services.append(
            {
                "name": "idle-culler",
                "command": [
                    sys.executable,
                    "-m",
                    "jupyterhub_idle_culler",
                    f"--timeout={idle}",
                    f"--cull-every={min(300, max(5, idle // 6))}",
                ],
            }
        )
        roles.append(
            {
                "name": "idle-culler",
                "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
                "services": ["idle-culler"],
            }
        )
    c.JupyterHub.services = services
    c.JupyterHub.load_roles = roles
