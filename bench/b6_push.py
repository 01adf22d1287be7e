"""B6: `invoke push` of the default cell to a local registry: the first push (every layer sent)
against a re-push of the unchanged images (target <= 0.1x the first push).

Both run here, now, against Debian's docker-registry started on 127.0.0.1 with storage in a
fresh temporary directory; the images are the built ones (`invoke build --set default` first).
The push uses --force so that the benchmark does not depend on an image-test record.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
from pathlib import Path

from bench.common import ROOT, invoke
from tests.local_registry import registry

RUNS = 3


def main() -> None:
    invoke("build", "--set", "default")  # no-op when everything is built
    work = Path(tempfile.mkdtemp(prefix="slurmforge-b6-"))
    try:
        shutil.copy(ROOT / "versions.yaml", work / "versions.yaml")
        config = str(work / "versions.yaml")
        with registry(work / "registry") as host:
            args = ("push", "--config", config, "--registry", f"{host}/bench", "--force")
            first = invoke(*args)
            again = [invoke(*args) for _ in range(RUNS)]
        size = sum(f.stat().st_size for f in (work / "registry").rglob("*") if f.is_file())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    re_push = statistics.median(again)
    print(
        f"B6 first push of the default cell (5 images, 10 tags, {size / 1e6:.0f} MB stored): "
        f"{first:.2f} s"
    )
    print(
        f"B6 re-push of the unchanged images: {re_push:.2f} s (median of {RUNS}: "
        f"{', '.join(f'{x:.2f}' for x in again)})"
    )
    print(f"B6 ratio: {re_push / first:.3f} (target <= 0.1)")


if __name__ == "__main__":
    main()
