"""The canary split of the Envoy front end: the route file Envoy watches, and its revisions.

With ``envoy.canary`` set (:mod:`shadoweval.capture.envoy_config`), Envoy takes the live routes from
``split_dir/split.yaml`` (filesystem RDS: ``path_config_source`` with ``watched_directory``;
Envoy re-reads the file when a file is moved into the directory). The file is an Envoy v3
``DiscoveryResponse`` with one ``RouteConfiguration`` (``live``), ``version_info`` = the
split's revision. Each forwarding route of the static table becomes three, in order:

1. header ``x-shadow-eval-arm: candidate`` → cluster ``candidate_model``;
2. header ``x-shadow-eval-arm: baseline`` → cluster ``live_model``;
3. otherwise ``weighted_clusters``: ``live_model`` and ``candidate_model`` weighted in
   basis points (:data:`WEIGHT_TOTAL`), ``use_hash_policy: true`` with the route's
   ``hash_policy`` on the session headers (first present: each policy ``terminal``) — the
   fallback when the session router (:mod:`shadoweval.capture.session_router`) does not answer in
   time: the same session key still lands on the same arm at one share, but a share
   change moves some sessions (Envoy's hash is not the router's monotone bucket), and a
   request without a session key is drawn at random.

The session router sets the arm header and clears the route cache, so Envoy matches again
and takes route 1 or 2. Every route removes the arm header before the upstream
(``request_headers_to_remove``), and rewrites ``Host`` to its cluster's authority
(``host_rewrite_literal``, per cluster in the weighted one). The share and revision are
kept readable in each weighted route's metadata (``filter_metadata.shadow_eval``), which
:func:`read_split` reads back.

A change is :func:`write_split`: the new file is written beside ``split.yaml``, fsynced,
and renamed onto it (``os.replace``: the rename is what ``watched_directory`` reacts to,
and Envoy never reads a half-written file); a copy ``split.<revision>.yaml`` stays as
history. Rolling back is writing a new revision with share 0. Envoy applies a file or
keeps the previous routes when it refuses one: ``http.live.rds.live.update_success`` /
``update_rejected`` / ``update_failure`` count the reloads (Envoy admin ``/stats``), and
:func:`applied_revision` reads the revision Envoy serves (admin
``/config_dump?resource=dynamic_route_configs``, ``version_info``).

Streams in flight keep the route (so the cluster) Envoy chose when they started: a switch
only affects requests that start after Envoy applied the file.

Sources: Envoy v1.40 API reference — ``config.route.v3.WeightedCluster``
(``use_hash_policy``, ``ClusterWeight.host_rewrite_literal``), ``RouteAction.hash_policy``,
``config.core.v3.PathConfigSource`` (``watched_directory``), the RDS statistics.
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import yaml

from shadoweval.capture.envoy_config import (
    ARM_HEADER,
    CANDIDATE_CLUSTER,
    ROUTE_CONFIG_NAME,
    SPLIT_FILE,
    EnvoyConfigSpec,
    disable_capture,
    route_table,
    upstream_authority,
)
from shadoweval.capture.envoy_config import UPSTREAM_CLUSTER as BASELINE_CLUSTER
from shadoweval.capture.envoy_process import EnvoyProcess
from shadoweval.errors import ConfigError

__all__ = [
    "ARM_HEADER",
    "BASELINE_CLUSTER",
    "CANDIDATE_CLUSTER",
    "SPLIT_FILE",
    "WEIGHT_TOTAL",
    "Arm",
    "Split",
    "applied_revision",
    "arm_of_cluster",
    "read_split",
    "render_split_routes",
    "write_split",
]

WEIGHT_TOTAL = 10_000
"""The weights' total: a share is expressed in basis points (0.01 %)."""

METADATA_KEY = "shadow_eval"
"""The ``filter_metadata`` namespace of a weighted route that holds the split."""

Arm = Literal["baseline", "candidate"]
"""Which version serves a request."""

_ROUTE_CONFIG_TYPE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"


def arm_of_cluster(name: str | None) -> Arm | None:
    """The arm served by Envoy cluster ``name``: ``live_model`` → ``"baseline"``,
    ``candidate_model`` → ``"candidate"``, anything else (``None`` included) → ``None``."""
    if name == BASELINE_CLUSTER:
        return "baseline"
    if name == CANDIDATE_CLUSTER:
        return "candidate"
    return None


@dataclass(frozen=True, slots=True)
class Split:
    """One revision of the canary split.

    Attributes:
        candidate_share: the share of sessions the candidate serves, 0..1 (rendered in
            basis points: rounded to 1/:data:`WEIGHT_TOTAL`).
        revision: the file's revision (Envoy's ``version_info``), >= 0; each change
            writes a higher one.

    Raises:
        ConfigError: a share outside 0..1 (or not finite), a negative revision.
    """

    candidate_share: float
    revision: int

    def __post_init__(self) -> None:
        share = self.candidate_share
        if isinstance(share, bool) or not isinstance(share, int | float):
            raise ConfigError(
                f"candidate_share must be a number in 0..1, got {share!r}",
                field="candidate_share",
                value=share,
            )
        if not (math.isfinite(share) and 0.0 <= share <= 1.0):
            raise ConfigError(
                f"candidate_share must be in 0..1, got {share!r}",
                field="candidate_share",
                value=share,
            )
        rev = self.revision
        if isinstance(rev, bool) or not isinstance(rev, int) or rev < 0:
            raise ConfigError(
                f"revision must be an integer >= 0, got {rev!r}", field="revision", value=rev
            )

    @property
    def candidate_weight(self) -> int:
        """The candidate's weight in basis points (0..:data:`WEIGHT_TOTAL`)."""
        return round(self.candidate_share * WEIGHT_TOTAL)


def render_split_routes(spec: EnvoyConfigSpec, split: Split) -> str:
    """The route file for ``split``: an Envoy v3 ``DiscoveryResponse`` (YAML text) with one
    ``RouteConfiguration`` named ``live``, ``version_info`` = ``str(split.revision)``.

    Same routes and capture rules as the static table of
    :func:`shadoweval.capture.envoy_config.render_envoy_config` (ext_proc only for ``POST`` to the
    captured routes without the ``x-shadow-eval`` marker), each forwarding route turned
    into the three described in the module docstring. Deterministic.

    Raises:
        ConfigError: ``spec.canary`` is ``None``, an upstream URL that is not
            ``http(s)://HOST[:PORT]``, or no captured route.
    """
    canary = spec.canary
    if canary is None:
        raise ConfigError("the canary split needs envoy.canary", field="envoy.canary")
    baseline_host = upstream_authority(spec.upstream_url)
    candidate_host = upstream_authority(canary.candidate_url, "envoy.canary.candidate_url")
    weight = split.candidate_weight
    hash_policy = [
        {"header": {"header_name": name.lower()}, "terminal": True} for name in spec.session_headers
    ]

    def action(cluster: str | None) -> dict[str, Any]:
        return _route_action(cluster, weight, candidate_host, baseline_host, hash_policy)

    def make(match: dict[str, Any], capture: bool) -> list[dict[str, Any]]:
        routes: list[dict[str, Any]] = []
        for arm, cluster in (("candidate", CANDIDATE_CLUSTER), ("baseline", BASELINE_CLUSTER)):
            armed = dict(match)
            armed["headers"] = [
                *match.get("headers", ()),
                {"name": ARM_HEADER, "string_match": {"exact": arm}},
            ]
            routes.append({"match": armed, "route": action(cluster)})
        routes.append(
            {
                "match": match,
                "route": action(None),
                "metadata": {
                    "filter_metadata": {
                        METADATA_KEY: {
                            "candidate_share": weight / WEIGHT_TOTAL,
                            "revision": split.revision,
                        }
                    }
                },
            }
        )
        for route in routes:
            route["request_headers_to_remove"] = [ARM_HEADER]
            if not capture:
                disable_capture(route)
        return routes

    document = {
        "version_info": str(split.revision),
        "resources": [
            {
                "@type": _ROUTE_CONFIG_TYPE,
                "name": ROUTE_CONFIG_NAME,
                "virtual_hosts": [
                    {"name": "live", "domains": ["*"], "routes": route_table(spec, make)}
                ],
            }
        ],
    }
    header = (
        "# Canary split of shadow-eval's Envoy front end"
        " (shadoweval.capture.canary_split.write_split).\n"
        f"# Revision {split.revision}: candidate {canary.candidate_url} serves "
        f"{weight}/{WEIGHT_TOTAL} of new sessions; baseline {spec.upstream_url}.\n"
    )
    return header + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def _route_action(
    cluster: str | None,
    weight: int,
    candidate_host: str,
    baseline_host: str,
    hash_policy: list[dict[str, Any]],
) -> dict[str, Any]:
    """A route's action: to ``cluster`` (an arm chosen by the router), or with ``cluster``
    ``None`` the weighted fallback (``weight`` basis points to the candidate, hashed on
    the session headers of ``hash_policy``); no route timeout, ``Host`` rewritten."""
    out: dict[str, Any] = {}
    if cluster is None:
        out["weighted_clusters"] = {
            # candidate first: Envoy takes the session header's xxHash64 mod the
            # total weight through the clusters in order, so the candidate gets
            # [0, weight): the router's rule (shadoweval.capture.session_router.stable_bucket)
            "clusters": [
                {
                    "name": CANDIDATE_CLUSTER,
                    "weight": weight,
                    "host_rewrite_literal": candidate_host,
                },
                {
                    "name": BASELINE_CLUSTER,
                    "weight": WEIGHT_TOTAL - weight,
                    "host_rewrite_literal": baseline_host,
                },
            ],
            "use_hash_policy": True,
        }
        if hash_policy:
            out["hash_policy"] = hash_policy
    else:
        out["cluster"] = cluster
        out["host_rewrite_literal"] = (
            candidate_host if cluster == CANDIDATE_CLUSTER else baseline_host
        )
    # no route timeout (long LLM streams), the client's Host in X-Forwarded-Host
    out["timeout"] = "0s"
    out["append_x_forwarded_host"] = True
    return out


def write_split(split_dir: Path, spec: EnvoyConfigSpec, split: Split) -> Path:
    """Write ``split`` as ``split_dir/split.yaml`` atomically; return that path.

    The file is written to a temporary file in ``split_dir``, fsynced, copied to the
    history file ``split.<revision>.yaml``, then renamed onto ``split.yaml``
    (``os.replace``, atomic on POSIX: Envoy sees the old file or the new one, and the
    rename into the watched directory is what makes it reload); the directory is fsynced.
    ``split_dir`` is created when missing.

    Raises:
        ConfigError: as :func:`render_split_routes`; the directory cannot be written
            (field ``envoy.canary.split_dir``).
    """
    text = render_split_routes(spec, split)
    split_dir = Path(split_dir)
    try:
        split_dir.mkdir(parents=True, exist_ok=True)
        history = split_dir / f"split.{split.revision}.yaml"
        for target in (history, split_dir / SPLIT_FILE):
            fd, tmp = tempfile.mkstemp(prefix=".split-", suffix=".tmp", dir=split_dir)
            try:
                os.fchmod(fd, 0o644)  # readable by an Envoy run as another user
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(text)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        dir_fd = os.open(split_dir, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as exc:
        raise ConfigError(
            f"cannot write the split file in {split_dir}: {exc}",
            field="envoy.canary.split_dir",
            value=str(split_dir),
        ) from exc
    return split_dir / SPLIT_FILE


def read_split(split_dir: Path) -> Split:
    """The split in ``split_dir/split.yaml`` (as :func:`write_split` wrote it).

    Raises:
        ConfigError: the file is missing or unreadable, not YAML, or not a split file
            (the message names the file and the field: ``version_info``,
            ``resources[0]``, the weighted routes' ``candidate_share``/``revision``).
    """
    path = Path(split_dir) / SPLIT_FILE

    def bad(what: str, field: str, value: object = None) -> ConfigError:
        return ConfigError(f"{path}: {what}", field=field, value=value)

    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise bad(f"cannot read the split file: {exc}", "envoy.canary.split_dir") from exc
    except yaml.YAMLError as exc:
        raise bad(f"not YAML: {exc}", "split.yaml") from exc
    if not isinstance(document, dict):
        raise bad("expected a DiscoveryResponse mapping", "split.yaml", type(document).__name__)
    version = document.get("version_info")
    if not isinstance(version, str) or not version.isdigit():
        raise bad(f"version_info must be a revision (digits), got {version!r}", "version_info")
    resources = document.get("resources")
    if not isinstance(resources, list) or len(resources) != 1:
        raise bad("expected exactly one resource (the route configuration)", "resources")
    config = resources[0]
    if not isinstance(config, dict) or config.get("name") != ROUTE_CONFIG_NAME:
        raise bad(f"resources[0] must be route configuration {ROUTE_CONFIG_NAME!r}", "resources[0]")
    found: list[tuple[object, object]] = []
    for host in config.get("virtual_hosts") or ():
        for route in (host or {}).get("routes") or ():
            meta = ((route or {}).get("metadata") or {}).get("filter_metadata") or {}
            if METADATA_KEY in meta:
                entry = meta[METADATA_KEY] or {}
                found.append((entry.get("candidate_share"), entry.get("revision")))
    if not found:
        raise bad(
            f"no route holds filter_metadata.{METADATA_KEY}.candidate_share",
            f"filter_metadata.{METADATA_KEY}",
        )
    if len(set(found)) != 1:
        raise bad(
            f"the routes disagree on the split: {sorted(set(map(str, found)))}",
            f"filter_metadata.{METADATA_KEY}",
        )
    share, revision = found[0]
    if revision != int(version):
        raise bad(
            f"filter_metadata.{METADATA_KEY}.revision {revision!r} is not version_info {version}",
            f"filter_metadata.{METADATA_KEY}.revision",
            revision,
        )
    try:
        return Split(candidate_share=share, revision=int(version))  # type: ignore[arg-type]
    except ConfigError as exc:
        raise bad(str(exc), f"filter_metadata.{METADATA_KEY}.{exc.field}", exc.value) from exc


async def applied_revision(envoy: str | EnvoyProcess, *, timeout_s: float = 5.0) -> int | None:
    """The split revision Envoy serves now: ``version_info`` of the dynamic route
    configuration in its admin ``/config_dump?resource=dynamic_route_configs``.

    Args:
        envoy: Envoy's admin URL, ``http://127.0.0.1:PORT``, or the
            :class:`~shadoweval.capture.envoy_process.EnvoyProcess` (its ``admin_url``).
        timeout_s: limit on the admin request.

    Returns:
        The revision, or ``None`` when Envoy has applied no route file (or the admin does
        not answer).

    Reload success and failure are counted by Envoy's ``http.live.rds.live.update_success``,
    ``update_rejected`` (a file Envoy refused: it keeps the previous routes) and
    ``update_failure`` (admin ``/stats``).
    """
    admin_url = envoy if isinstance(envoy, str) else envoy.admin_url
    if not admin_url:
        return None
    try:
        async with httpx.AsyncClient(timeout=timeout_s) as client:
            resp = await client.get(
                admin_url + "/config_dump", params={"resource": "dynamic_route_configs"}
            )
        if resp.status_code != 200:
            return None
        data = resp.json()
    except (httpx.HTTPError, ValueError):
        return None
    for entry in data.get("configs", ()) if isinstance(data, dict) else ():
        version = entry.get("version_info") if isinstance(entry, dict) else None
        config = entry.get("route_config") or {} if isinstance(entry, dict) else {}
        if (
            isinstance(version, str)
            and version.isdigit()
            and config.get("name")
            in (
                ROUTE_CONFIG_NAME,
                None,
            )
        ):
            return int(version)
    return None
