"""The metrics images: Prometheus' own promtool accepts the alert rules and the configuration
`invoke deploy` writes for the shipped cluster file and passes the rules' unit tests
(monitoring/rules-test.yml); the exporter reads the metrics token as root, then runs as its own
account with its libraries and answers a scrape with that token alone."""

from __future__ import annotations

import shutil
from pathlib import Path

import docker

from slurmforge.deploy import generated, loader, monitoring, roles
from slurmforge.versions import load as load_versions
from tests.common import ROOT


def _run(client: docker.DockerClient, image: str, command: str, **kw) -> str:
    container = client.containers.run(
        image,
        ["-c", command],
        entrypoint="sh",
        detach=True,
        labels={"io.slurmforge.test": "image"},
        **kw,
    )
    try:
        code = container.wait(timeout=120)["StatusCode"]
        out = container.logs().decode()
    finally:
        container.remove(force=True)
    assert code == 0, out
    return out


def test_promtool_accepts_the_rules_and_config_and_passes_their_tests(
    client: docker.DockerClient, images: dict[str, str], tmp_path: Path
) -> None:
    cluster = loader.load(ROOT / "deploy" / "cluster.yaml", load_versions(ROOT / "versions.yaml"))
    source = str(cluster.path)
    (tmp_path / monitoring.RULES_FILE).write_text(
        generated.dump_yaml(monitoring.rules(cluster), source)
    )
    config = monitoring.prometheus_config(cluster, ["gpu-0"])
    (tmp_path / monitoring.CONFIG_FILE).write_text(generated.dump_yaml(config, source))
    shutil.copy(ROOT / "monitoring" / "rules-test.yml", tmp_path)
    tmp_path.chmod(0o755)
    for f in tmp_path.iterdir():
        f.chmod(0o644)
    # each scrape's token, where the deploy binds it (promtool checks that the file is there)
    token = tmp_path.parent / "metrics-token"
    token.write_text("a-token\n")
    token.chmod(0o644)
    where = roles.PROMETHEUS_CONF.path
    out = _run(
        client,
        images["prometheus"],
        f"cd {where} && promtool check config {monitoring.CONFIG_FILE} "
        f"&& promtool test rules rules-test.yml",
        volumes={
            str(tmp_path): {"bind": where, "mode": "ro"},
            str(token): {
                "bind": f"{roles.LOCAL_SECRETS_DIR}/{roles.METRICS_TOKEN.file}",
                "mode": "ro",
            },
        },
    )
    assert "SUCCESS: 8 rules found" in out and "SUCCESS" in out.split("Unit Testing")[1]


def test_the_exporter_runs_unprivileged_with_its_libraries(
    client: docker.DockerClient, images: dict[str, str]
) -> None:
    image = client.images.get(images["exporter"])
    command = image.attrs["Config"]["Cmd"]
    assert command[command.index("--user") + 1] == "slurm-exporter", command
    out = _run(
        client,
        images["exporter"],
        "id -u slurm-exporter; runuser -u slurm-exporter -- python3 -c "
        "'import pynvml, prometheus_client; print(pynvml.NVML_SUCCESS)'",
    )
    uid, nvml_success = out.split()
    assert int(uid) != 0 and nvml_success == "0"
    # started as the image starts it (the GPU collector: no Slurm needed), from a root-only
    # token file: it runs as that account, and answers a scrape with the token alone
    out = _run(client, images["exporter"], SCRAPED)
    running_as, without, with_token = out.split()
    assert (int(running_as), without, with_token) == (int(uid), "401", "200"), out


SCRAPED = """
umask 077 && echo the-token > /run/token
METRICS_TOKEN_FILE=/run/token python3 /usr/local/lib/slurmforge/slurm_exporter.py \
  --user slurm-exporter gpu --node probe --listen 127.0.0.1:9342 2> /dev/null &
sleep 3
awk '/^Uid:/ {print $2}' /proc/$!/status
python3 - <<'PY'
import urllib.error, urllib.request as u
url = "http://127.0.0.1:9342/metrics"
try:
    u.urlopen(url)
except urllib.error.HTTPError as exc:
    print(exc.code)
print(u.urlopen(u.Request(url, headers={"Authorization": "Bearer the-token"})).status)
PY
"""
