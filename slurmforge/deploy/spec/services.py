"""The services of a cluster beside Slurm's own daemons, as a cluster file describes them:
accounting (slurmdbd and its database), the REST API, and metrics (the exporter, the alert rules'
thresholds, the local Prometheus)."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    Field,
    StrictBool,
    StrictInt,
    StringConstraints,
    TypeAdapter,
    ValidationError,
)

from slurmforge import refs
from slurmforge.deploy.spec.fields import AbsPath, AccountName
from slurmforge.deploy.spec.identity import GroupName
from slurmforge.deploy.spec.site import AccountSpec, QosSpec
from slurmforge.errors import quote
from slurmforge.inputs import Model

Port = Annotated[StrictInt, Field(ge=1, le=65535)]


class DatabaseSpec(Model):
    """A MySQL/MariaDB the site already runs, instead of the cluster's own MariaDB."""

    host: Annotated[str, StringConstraints(strict=True), AfterValidator(refs.host)]
    """The database server's host name or address."""
    port: Port = 3306
    """Its port."""
    user: Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.-]{1,80}$")] = (
        "slurm"
    )
    """The database user slurmdbd logs in as."""
    password_secret: AbsPath
    """A file on the deploying machine that holds the password (never copied anywhere else in clear:
    the local target mounts it, the k8s target makes a Secret of it)"""
    name: Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_]{1,64}$")] = (
        "slurm_acct_db"
    )
    """The database slurmdbd keeps its records in."""


# AccountingStorageEnforce's keywords (slurm.conf(5))
Enforce = Literal["associations", "limits", "nojobs", "nosteps", "qos", "safe", "wckeys"]


# Tokens (`scontrol token`, slurmrestd) no ordinary user may have for longer: max_token_lifespan
# of AuthAltParameters (slurm.conf(5), Slurm 23.11 to 26.05). A duration as ISO 8601 writes it
# (PT1H, P1D) or a number of seconds, parsed by pydantic.
def _seconds(value: object) -> object:
    """A duration's whole seconds (kept as a number: the model is dumped as JSON)."""
    if isinstance(value, bool):
        return value  # refused below, not taken for 1 second
    try:
        return int(_DURATION.validate_python(value).total_seconds())
    except ValidationError:
        raise ValueError(
            f"expected a duration as ISO 8601 writes it (PT30M, PT1H, P1D) or a number of "
            f"seconds, got {quote(value)}"
        ) from None


_DURATION = TypeAdapter(timedelta)
ISO_DURATION = r"^P([0-9]+W)?([0-9]+D)?(T([0-9]+H)?([0-9]+M)?([0-9.]+S)?)?$"  # for the schema
TokenLifespan = Annotated[
    StrictInt,
    BeforeValidator(
        _seconds,
        json_schema_input_type=int | Annotated[str, StringConstraints(pattern=ISO_DURATION)],
    ),
    Field(ge=60, le=366 * 86400),
]


class AccountingSpec(Model):
    """Job accounting: slurmdbd on a database, sacct/sacctmgr, fair-share."""

    enabled: StrictBool = True
    """Run slurmdbd and keep job records (sacct, sacctmgr, fair-share); false: no accounting, and no
    REST API."""
    enforce: tuple[Enforce, ...] = ("associations", "limits", "qos", "safe")
    """AccountingStorageEnforce: a job runs only under an association its user has, within its
    limits and QoS, and is refused at submission when it could never run (safe); [] lets users
    without an association submit, charged to nobody's limits"""
    max_token_lifespan: TokenLifespan = 3600
    """The longest an ordinary user's token may live, in seconds or as ISO 8601 writes it (PT1H);
    root and SlurmUser are not limited"""
    default_account: AccountName = "default"
    """The account createuser puts a new user under (unless given --account)"""
    database: DatabaseSpec | None = None
    """A database the site already runs; unset: the cluster's own MariaDB"""
    qos: tuple[QosSpec, ...] = ()
    """Declared QoS and accounts, made or updated with sacctmgr on every deploy; ones the database
    has beyond these are reported, never deleted"""
    accounts: tuple[AccountSpec, ...] = ()
    """Declared accounts, made or updated with sacctmgr on every deploy; ones the database has
    beyond these are reported, never deleted."""
    accounts_from_groups: dict[AccountName, GroupName] = Field(default_factory=dict)
    """Account → directory group (identity.source: ldap): every deploy makes the account's users the
    group's members, adding and deleting their associations (job records stay)"""


class RestSpec(Model):
    """slurmrestd, published on the login address (needs accounting for its JWT keys)."""

    enabled: StrictBool = True
    """Run slurmrestd (needs accounting)."""
    port: Port = 6820
    """slurmrestd's port on the login address."""


class PrometheusSpec(Model):
    """The local target's own Prometheus, scraping the exporter (Kubernetes: the site's)."""

    enabled: StrictBool = True
    """Run the local target's own Prometheus (on Kubernetes the site's Prometheus scrapes through a
    ServiceMonitor)."""
    port: Port = 9090
    """Published on the login address"""
    scrape_interval: Annotated[StrictInt, Field(ge=1, le=3600)] = 15
    """How often Prometheus scrapes, in seconds."""


class MetricsSpec(Model):
    """The exporter (both targets), the alert rules' thresholds and the local Prometheus."""

    enabled: StrictBool = True
    """Run the Slurm exporter and its alert rules."""
    usage_window: Annotated[StrictInt, Field(ge=60, le=86400)] = 3600
    """Per-job usage (CPU time, largest RSS) of the jobs accounting saw end this long ago or later
    (seconds)"""
    pending_alert_after: Annotated[StrictInt, Field(ge=60)] = 3600
    """SlurmJobPendingTooLong fires for a partition whose oldest pending job waited this long
    (seconds)"""
    prometheus: PrometheusSpec = PrometheusSpec()
    """The local target's own Prometheus."""
