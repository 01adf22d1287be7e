"""Run the build graph: independent targets concurrently, unchanged ones skipped, all logged."""

from __future__ import annotations

import graphlib
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from slurmforge import bootstrap, buildlog
from slurmforge.engine import APIError, Engine, EngineError, ImageInfo
from slurmforge.errors import SlurmforgeError
from slurmforge.matrix import BuildTarget
from slurmforge.plan import UNCHANGED, Action, Decision, Planner

_STEP = re.compile(r"^Step (\d+)/(\d+) :")
TAIL_LINES = 30


class Status(StrEnum):
    BUILT = "built"
    CACHED = "cached"
    FAILED = "failed"
    BLOCKED = "blocked"  # a parent failed: not attempted
    CANCELLED = "cancelled"  # --fail-fast stopped it


@dataclass(frozen=True)
class Result:
    target: BuildTarget
    status: Status
    seconds: float
    size: int = 0
    image_id: str = ""
    note: str = ""
    log: Path | None = None
    lacking: tuple[str, ...] = ()  # optional features the image goes without

    @property
    def ok(self) -> bool:
        return self.status in (Status.BUILT, Status.CACHED)

    def row(self) -> dict[str, Any]:
        return {
            "target": self.target.id,
            "status": str(self.status),
            "seconds": round(self.seconds, 2),
            "size": self.size,
            "note": self.note,
            "lacking": list(self.lacking),
        }


@dataclass(frozen=True)
class BuildOptions:
    jobs: int = 2
    fail_fast: bool = False
    log_root: Path = Path(".cache/logs")
    tmp_root: Path = Path(".cache/tmp")
    oci: dict[str, str] = field(default_factory=dict)  # org.opencontainers.image.* common labels


class BuildRunner:
    def __init__(
        self,
        planner: Planner,
        engine: Engine,
        options: BuildOptions,
        known: Mapping[str, Decision] | None = None,
    ) -> None:
        self.planner = planner
        # Decisions already made by a plan of this run; a "cached" one is final (its parents
        # were cached too), so it need not be rendered and inspected a second time.
        self.known = {i: d for i, d in (known or {}).items() if d.action is Action.CACHED}
        self.engine = engine
        self.options = options
        self.stop = threading.Event()
        self.results: dict[str, Result] = {}
        self._slots = deque(range(options.jobs))
        self._lock = threading.Lock()
        self.log_dir = buildlog.new_log_dir(options.log_root)

    def run(self, targets: Sequence[BuildTarget]) -> list[Result]:
        """Build ``targets`` in dependency order; a result per target, in their order."""
        graph = {t.id: set(t.parents) for t in targets}
        by_id = {t.id: t for t in targets}
        sorter = graphlib.TopologicalSorter(graph)
        sorter.prepare()
        running: dict[Future[Result], str] = {}
        with ThreadPoolExecutor(max_workers=self.options.jobs) as pool:
            while sorter.is_active():
                for tid in sorter.get_ready():
                    target = by_id[tid]
                    broken = [p for p in target.parents if not self.results[p].ok]
                    if broken or self.stop.is_set():
                        status = Status.CANCELLED if self.stop.is_set() else Status.BLOCKED
                        note = f"{broken[0]} {self.results[broken[0]].status}" if broken else ""
                        self._finish(Result(target, status, 0.0, note=note))
                        sorter.done(tid)
                    else:
                        running[pool.submit(self._one, target)] = tid
                if not running:
                    continue
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for fut in done:
                    tid = running.pop(fut)
                    result = fut.result()
                    self._finish(result)
                    sorter.done(tid)
        results = [self.results[t.id] for t in targets]
        buildlog.write_summary(self.log_dir, [r.row() for r in results])
        return results

    def _finish(self, result: Result) -> None:
        self.results[result.target.id] = result
        mark = {Status.BUILT: "built", Status.CACHED: "cached"}.get(result.status, result.status)
        note = f" ({result.note})" if result.note else ""
        tqdm.write(f"{mark:>9} {result.target.id} {result.seconds:.1f}s{note}", file=sys.stderr)
        if result.status is Status.FAILED and result.log is not None:
            tail = result.log.read_text(errors="replace").splitlines()[-TAIL_LINES:]
            tqdm.write("\n".join(f"    | {line}" for line in tail), file=sys.stderr)
            tqdm.write(f"    full log: {result.log}", file=sys.stderr)

    def _parents(self, target: BuildTarget) -> dict[str, Decision | str]:
        return {p: self.results[p].image_id for p in target.parents}

    def _one(self, target: BuildTarget) -> Result:
        start = time.monotonic()
        if self.stop.is_set():  # queued before --fail-fast tripped
            return Result(target, Status.CANCELLED, 0.0, note="fail-fast")
        decision = self.known.get(target.id) or self.planner.evaluate(target, self._parents(target))
        if decision.action is Action.CACHED:
            assert decision.existing is not None
            self._tag_all(target, decision.existing.id)
            return Result(
                target,
                Status.CACHED,
                time.monotonic() - start,
                decision.existing.size,
                decision.existing.id,
                "" if decision.reason == UNCHANGED else decision.reason,
                lacking=decision.lacking,
            )
        log_path = self.log_dir / f"{target.id.replace('/', '_')}.log"
        with self._lock:
            slot = self._slots.popleft() if self._slots else 0
        try:
            with log_path.open("w") as log:
                print(f"# {target.id}: {decision.reason}", file=log, flush=True)
                info = self._build(decision, log, slot)
            self._tag_all(target, info.id)
            return Result(
                target,
                Status.BUILT,
                time.monotonic() - start,
                info.size,
                info.id,
                decision.reason,
                log_path,
                decision.lacking,
            )
        except _Cancelled:
            return Result(
                target, Status.CANCELLED, time.monotonic() - start, note="fail-fast", log=log_path
            )
        except (
            _BuildFailed,
            SlurmforgeError,
            EngineError,
            OSError,
            subprocess.CalledProcessError,
            RuntimeError,
        ) as exc:
            # One target's failure is reported in its Result; independent targets go on.
            with log_path.open("a") as log:
                print(f"\nslurmforge: {type(exc).__name__}: {exc}", file=log)
            if self.options.fail_fast:  # set here, before this worker takes the next job
                self.stop.set()
            return Result(
                target, Status.FAILED, time.monotonic() - start, note=_short(exc), log=log_path
            )
        finally:
            with self._lock:
                self._slots.append(slot)

    def _labels(self, decision: Decision) -> dict[str, str]:
        target = decision.target
        version = target.ref.rpartition(":")[2]
        return {
            **self.options.oci,
            "org.opencontainers.image.version": version,
            "org.opencontainers.image.title": target.component,
            "io.slurmforge.slurm": target.slurm or "",
            **decision.labels(),
        }

    def _build(self, decision: Decision, log: IO[str], slot: int) -> ImageInfo:
        target = decision.target
        labels = self._labels(decision)
        if isinstance(spec := decision.recipe, bootstrap.Base):
            with _bar(target, slot, bar_format="{desc}: bootstrapping {elapsed}"):
                bootstrap.build_base(
                    self.engine, spec, target.ref, labels, log, self.options.tmp_root
                )
        else:
            self._docker_build(decision, labels, log, slot)
        info = self.engine.inspect(target.ref)
        if info is None or info.inputs_hash != decision.inputs_hash:
            raise RuntimeError(f"the build finished but {target.ref} is not the new image")
        return info

    def _docker_build(
        self, decision: Decision, labels: dict[str, str], log: IO[str], slot: int
    ) -> None:
        target, rendered = decision.target, decision.rendered
        assert rendered is not None
        self.options.tmp_root.mkdir(parents=True, exist_ok=True)
        with (
            tempfile.TemporaryFile(dir=self.options.tmp_root) as context,
            _bar(target, slot, unit="step") as bar,
        ):
            rendered.write_context(context)
            context.seek(0)
            print(rendered.dockerfile, file=log, flush=True)
            stream = self.engine.build(context, target.ref, labels, target.platform)
            try:
                for event in stream:
                    if self.stop.is_set():
                        raise _Cancelled
                    _record(event, log, bar)
            finally:
                close = getattr(stream, "close", None)
                if close is not None:
                    close()

    def _tag_all(self, target: BuildTarget, image_id: str) -> None:
        for ref in target.tags:
            self.engine.tag(image_id, ref)


class _Cancelled(Exception):
    pass


class _BuildFailed(Exception):
    pass


def _bar(target: BuildTarget, slot: int, **kwargs: Any) -> tqdm:
    """One progress bar per running target (hidden when stderr is not a terminal)."""
    return tqdm(desc=target.id, position=slot, leave=False, file=sys.stderr, disable=None, **kwargs)


def _record(event: dict[str, Any], log: IO[str], bar: tqdm) -> None:
    if "error" in event:
        detail = event.get("errorDetail", {}).get("message") or event["error"]
        print(detail, file=log, flush=True)
        raise _BuildFailed(detail.strip().splitlines()[-1] if detail.strip() else "build failed")
    text = event.get("stream") or event.get("status") or ""
    if not text:
        return
    log.write(text if text.endswith("\n") else text + "\n")
    if m := _STEP.match(text):
        bar.total = int(m.group(2))
        bar.n = int(m.group(1)) - 1
        bar.refresh()


def _short(exc: Exception) -> str:
    if isinstance(exc, APIError):
        return str(exc.explanation or exc)[:160]
    return str(exc).strip().splitlines()[-1][:160] if str(exc).strip() else type(exc).__name__
