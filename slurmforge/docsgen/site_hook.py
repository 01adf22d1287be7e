"""mkdocs hook (mkdocs.yml ``hooks:``): the JSON Schemas in schema/ are published with the site, at
schema/NAME, so an editor may name them by URL as well as by path."""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

from slurmforge.docsgen.schema import DIR, FILES


def on_files(files: Files, config) -> Files:
    root = Path(config["config_file_path"]).parent
    for name in FILES.values():
        path = root / DIR / name
        files.append(File.generated(config, f"{DIR}/{name}", abs_src_path=str(path)))
    return files
