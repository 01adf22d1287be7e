"""The docs' code blocks, tried as a reader would use them: a YAML block titled as a cluster or
versions file (or a part of one) loads through the real loaders; a Python block runs; an error
message the error reference quotes is still one the code can print.

Titles: ``cluster.yaml`` (a whole cluster file; the layers of deploy/ beside it), ``cluster.yaml
(part)`` (merged onto the shipped deploy/cluster.yaml as layers merge), ``versions.yaml (part)``
(merged onto the shipped versions.yaml). An untitled YAML block whose keys are a cluster file's
(or else versions.yaml's) names files the page does not ship: merged the same way, it is checked
against the file's JSON Schema, which knows every key but reads no file.
``python -m tests.docs_blocks PAGE.md…`` checks pages and prints what fails."""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import jsonschema
import yaml

from slurmforge.deploy import loader
from slurmforge.deploy.spec.layers import deep_update
from slurmforge.docsgen import schema
from slurmforge.errors import SlurmforgeError
from slurmforge.versions import load as load_versions
from tests.common import dump_yaml, load_yaml

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
VERSIONS = ROOT / "versions.yaml"
FENCE = re.compile(
    r"^(?P<indent> *)```(?P<lang>[\w-]*)"  # an opening fence: its indent and language,
    r'(?: +title="(?P<title>[^"]*)")?[^\n]*\n'  # its title, if any
    r"(?P<body>.*?)^(?P=indent)```",  # up to the closing fence at the same indent
    re.M | re.S,
)
TITLES = ("cluster.yaml", "cluster.yaml (part)", "versions.yaml (part)")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    lang: str
    title: str | None
    text: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    out = []
    for m in FENCE.finditer(text):
        indent = len(m["indent"])
        body = "".join(line[indent:] for line in m["body"].splitlines(keepends=True))
        line = text.count("\n", 0, m.start()) + 1
        out.append(Block(page, line, m["lang"], m["title"], body))
    return out


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def _load_cluster(data: object, work: Path) -> None:
    shutil.copytree(ROOT / "deploy" / "layers", work / "layers", dirs_exist_ok=True)
    shutil.copy(ROOT / "deploy" / "directory.ldif", work / "directory.ldif")
    path = work / "cluster.yaml"
    path.write_text(dump_yaml(data, sort_keys=False))
    loader.load(path, load_versions(ROOT / "versions.yaml"))


def _load_versions(data: object, work: Path) -> None:
    (work / "images").symlink_to(ROOT / "images")
    path = work / "versions.yaml"
    path.write_text(dump_yaml(data, sort_keys=False))
    load_versions(path)


def check(block: Block) -> str | None:
    """What is wrong with ``block`` as the docs use it, or None."""
    if block.lang == "python":
        try:
            exec(compile(block.text, block.where, "exec"), {"__name__": "__docs__"})
        except Exception as exc:  # a block that raises is what this reports
            return f"{block.where}: the Python block raised {exc!r}"
        return None
    if block.lang != "yaml":
        return None
    try:
        data = load_yaml(block.text)
    except yaml.YAMLError as exc:
        return f"{block.where}: not YAML: {exc}"
    if block.title not in TITLES:
        return _against_schema(block, data)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            if block.title == "cluster.yaml":
                _load_cluster(data, Path(tmp))
            elif block.title == "cluster.yaml (part)":
                shipped = load_yaml((ROOT / "deploy" / "cluster.yaml").read_text())
                _load_cluster(deep_update(shipped, data), Path(tmp))
            else:
                shipped = load_yaml((ROOT / "versions.yaml").read_text())
                _load_versions(deep_update(shipped, data), Path(tmp))
        except SlurmforgeError as exc:
            return f"{block.where}: {block.title} does not load: {exc.message}"
    return None


def _against_schema(block: Block, data: object) -> str | None:
    """An untitled block that is part of a cluster or versions file, checked by that file's
    schema once merged onto the shipped one; None for any other YAML."""
    if not isinstance(data, dict) or not data:
        return None
    for name, shipped in (("cluster", ROOT / "deploy" / "cluster.yaml"), ("versions", VERSIONS)):
        made = schema.SCHEMAS[name]()
        if set(data) <= set(made["properties"]):
            whole = deep_update(load_yaml(shipped.read_text()), data)
            wrong = next(jsonschema.Draft202012Validator(made).iter_errors(whole), None)
            if wrong is None:
                return None
            at = ".".join(str(p) for p in wrong.absolute_path)
            return f"{block.where}: a part of {shipped.name}: {at}: {wrong.message[:200]}"
    return None


# -- the error reference: each message it quotes, as code can still print it ------------------

MESSAGE = re.compile(r"^#{2,3} `(?P<text>[^`]+)`", re.M)
PLACEHOLDER = re.compile(r"<[^<>]+>|…|\.\.\.")


def _sources() -> str:
    files = [ROOT / "tasks.py", *sorted((ROOT / "slurmforge").rglob("*.py"))]
    return "\n".join(path.read_text() for path in files)


def quoted_messages(page: Path) -> list[tuple[str, list[str]]]:
    """Each message a page quotes in a heading, and its literal parts (between placeholders)."""
    out = []
    for m in MESSAGE.finditer(page.read_text()):
        parts = [p.strip() for p in PLACEHOLDER.split(m["text"])]
        out.append((m["text"], [p for p in parts if len(p) >= 6]))
    return out


def stale_messages(page: Path) -> list[str]:
    """The messages ``page`` quotes whose words the code no longer has."""
    source = _sources()
    return [
        f"{page.relative_to(ROOT)}: `{text}`: the code has no {part!r}"
        for text, parts in quoted_messages(page)
        for part in parts
        if part not in source
    ]


def main(argv: list[str]) -> int:
    targets = [Path(a).resolve() for a in argv] or pages()
    problems = [p for page in targets for b in blocks(page) if (p := check(b))]
    errors = DOCS / "reference" / "errors.md"
    if errors in targets:
        problems += stale_messages(errors)
    print("\n".join(problems) or f"{len(targets)} pages: every block holds")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
