"""A REST client of slurmrestd as a user's script is one: HTTP with Slurm's two JWT headers."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def call(
    url: str,
    *,
    user: str | None = None,
    jwt: str | None = None,
    body: dict[str, Any] | None = None,
) -> tuple[int, dict[str, Any]]:
    """GET ``url`` (POST with ``body``) as ``user`` with token ``jwt``: the status and the JSON
    answer (or its text, under "text", when it is not JSON)."""
    headers = {"Content-Type": "application/json"}
    if user is not None:
        headers["X-SLURM-USER-NAME"] = user
    if jwt is not None:
        headers["X-SLURM-USER-TOKEN"] = jwt
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data, headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        text = exc.read()
        try:
            return exc.code, json.loads(text or b"{}")
        except ValueError:
            return exc.code, {"text": text.decode(errors="replace")}
