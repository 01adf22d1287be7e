"""Grammars of the references this tool is given: OCI image references and registry prefixes
(the distribution reference grammar, through docker-image-py), URLs (urllib's RFC 3986 split),
IP addresses (ipaddress) and cron schedules (the grammar Kubernetes' CronJob takes: robfig/cron's
standard parser, written out below, as no Python library parses exactly that); and `redact`,
which every URL goes through before it is printed.

Each check returns the value or raises ValueError with what was expected, for pydantic
validators and option parsing alike.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import urllib.parse

from docker_image import reference

from slurmforge.errors import quote

CREDENTIALS_HINT = (
    "keep credentials out of URLs: ~/.netrc (read by downloads, git and pip), pip's config or "
    "keyring, `docker login` for registries"
)
# Kubernetes' CronJob (robfig/cron's standard parser) accepts these besides 5 fields.
CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# robfig/cron's standard fields: (name, low, high, names accepted for numbers)
_MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
_DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]
_CRON_FIELDS = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, {m: i for i, m in enumerate(_MONTHS, 1)}),
    ("day of week", 0, 6, {d: i for i, d in enumerate(_DAYS)}),
)
# Go's time.ParseDuration, which `@every <duration>` goes through
_GO_DURATION = re.compile(r"[-+]?(?:(?:\d+\.?\d*|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+")


def image_ref(value: str) -> str:
    """A complete image reference (``debian:12``, ``ghcr.io/acme/x:1@sha256:…``)."""
    try:
        reference.Reference.parse_normalized_named(value)
    except Exception as exc:  # the library's own hierarchy: one class per rule
        raise ValueError(f"expected an image reference, got {quote(value)} ({_why(exc)})") from None
    return value


def registry_prefix(value: str) -> str:
    """Where images are pushed: ``HOST[:PORT][/PATH]``, to which ``/<component>:<tag>`` is added."""
    if "://" in value:
        raise ValueError(
            f"expected a registry without a scheme (HOST[:PORT][/PATH]), got {quote(value)}"
        )
    try:
        reference.Reference.parse_normalized_named(f"{value}/component:tag")
    except Exception as exc:
        raise ValueError(
            f"expected a registry prefix HOST[:PORT][/PATH], got {quote(value)} ({_why(exc)})"
        ) from None
    return value


@functools.cache
def _named(registry: str, name: str) -> bool:
    """``registry/name`` is a valid name of the reference grammar (parsed once per pair)."""
    try:
        reference.Reference.parse_normalized_named(f"{registry}/{name}:tag")
    except Exception:
        return False
    return True


def tagged(registry: str, name: str, tag: str) -> str:
    """``registry/name:tag``, refused unless the tag (made from a template) is a valid tag."""
    ref = f"{registry}/{name}:{tag}"
    # the grammar's name and tag are independent: a set of thousands of cells repeats one name
    # per component, so the name is parsed once and each tag matched alone, by the library's own
    # tag expression; anything that fails is parsed whole, for the library's reason
    if _named(registry, name) and reference.ImageRegexps.ANCHORED_TAG_REGEXP.fullmatch(tag):
        return ref
    try:
        parsed = reference.Reference.parse_normalized_named(ref)
    except Exception as exc:
        raise ValueError(f"makes the invalid image reference {quote(ref)} ({_why(exc)})") from None
    if parsed["tag"] != tag:
        raise ValueError(f"makes the invalid image reference {quote(ref)} (tag {quote(tag)})")
    return ref


def _why(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def url(value: str, schemes: tuple[str, ...]) -> str:
    """A URL with one of ``schemes`` and a host (``file:`` an absolute path, no host), and no
    credentials."""
    try:
        parts = urllib.parse.urlsplit(value)
        host = parts.hostname
        parts.port  # noqa: B018 (reading it raises on a port that is not one)
    except ValueError as exc:
        raise ValueError(f"expected a URL, got {quote(redact(value))} ({exc})") from None
    wanted = ", ".join(f"{s}://" for s in schemes)
    if parts.scheme not in schemes:
        raise ValueError(f"expected a URL starting with {wanted}, got {quote(redact(value))}")
    if parts.username is not None or parts.password is not None:
        raise ValueError(f"expected a URL without credentials, got {quote(redact(value))}")
    if parts.scheme == "file":
        if parts.netloc or not parts.path.startswith("/"):
            raise ValueError(f"expected file:///absolute/path, got {quote(value)}")
    elif not host:
        raise ValueError(f"expected a URL with a host, got {quote(redact(value))}")
    if any(c.isspace() for c in value):
        raise ValueError(f"expected a URL without spaces, got {quote(redact(value))}")
    return value


_USERINFO = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@]+@")


def redact(text: str) -> str:
    """``text`` (a URL, or a message with URLs in it) with the credentials of every URL
    replaced by ``***``: whatever prints a URL or a message passes it through here."""
    return _USERINFO.sub(r"\1***@", text)


def ip_address(value: str) -> str:
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValueError(f"expected an IP address such as 127.0.0.1, got {quote(value)}") from None


_LABEL = r"[A-Za-z0-9]([-A-Za-z0-9]{0,61}[A-Za-z0-9])?"  # RFC 1123


def host(value: str) -> str:
    """A host to connect to: an IP address, or a host name of RFC 1123 labels."""
    try:
        return ip_address(value)
    except ValueError:
        pass
    if len(value) > 253 or not re.fullmatch(rf"{_LABEL}(\.{_LABEL})*", value):
        raise ValueError(f"expected a host name or IP address, got {quote(value)}")
    return value


def cron(value: str) -> str:
    """A Kubernetes CronJob schedule: exactly 5 fields (minute hour day-of-month month
    day-of-week), one of CRON_MACROS or ``@every <duration>``, as robfig/cron's standard parser
    (which the API server validates with) reads them. A sixth field, ``L``/``W``/``#`` and day 7
    are other crons' extensions it refuses; so is a ``TZ=`` prefix (1.25+ has ``timeZone``)."""
    example = "e.g. '0 */6 * * *'"
    if value in CRON_MACROS:
        return value
    if value.startswith("@every "):
        if _GO_DURATION.fullmatch(value[len("@every ") :].strip()):
            return value
        raise ValueError(f"expected '@every' and a duration such as 1h30m, got {quote(value)}")
    fields = value.split()
    if value.startswith(("TZ=", "CRON_TZ=")):
        raise ValueError(
            "expected a schedule without a time zone (Kubernetes refuses TZ= in it), "
            f"got {quote(value)}"
        )
    if len(fields) != 5:
        raise ValueError(
            f"expected a cron schedule of 5 fields, {example} (Kubernetes has no seconds field), "
            f"got {len(fields)} in {quote(value)}"
        )
    for text, (name, low, high, names) in zip(fields, _CRON_FIELDS, strict=True):
        for part in text.split(","):
            why = _cron_part(part, low, high, names)
            if why:
                raise ValueError(
                    f"expected a cron schedule of 5 fields, {example}: its {name} "
                    f"{quote(part)} {why}, got {quote(value)}"
                )
    return value


def _cron_part(part: str, low: int, high: int, names: dict[str, int]) -> str | None:
    """Why one comma-separated part of a cron field is refused (None: accepted): ``*``, ``?``,
    ``N`` or ``N-M``, each optionally ``/STEP``; numbers within [low, high] or names."""

    def number(text: str) -> int | None:
        if text.lower() in names:
            return names[text.lower()]
        return int(text) if text.isascii() and text.isdigit() else None

    span, _, step = part.partition("/")
    if "/" in step:
        return "has more than one '/'"
    if step and not (step.isascii() and step.isdigit() and int(step) > 0):
        return "needs a step of 1 or more after '/'"
    if span in ("*", "?"):
        return None
    ends = span.split("-")
    if len(ends) > 2:
        return "has more than one '-'"
    values = [number(e) for e in ends]
    if None in values:
        return f"is not a number from {low} to {high}" + (" or a name" if names else "")
    if any(not low <= v <= high for v in values):  # type: ignore[operator]
        return f"is outside {low}-{high}"
    if len(values) == 2 and values[0] > values[1]:  # type: ignore[operator]
        return "has a range that runs backwards"
    return None
