"""The random label sample read back: which labelled pairs were drawn at random.

``shadow-eval export --ppi-sample`` draws pairs at random from every changed pair of each
task type and lists them in the manifest (``ppi_sample``: id, seed, fraction, exchange
ids; :mod:`shadoweval.export.manifest`). The net-harm estimator may use the labels of
exactly those pairs as the labelled sample of prediction-powered inference (PPI++,
Angelopoulos, Duchi & Zrnic 2023), since they are a uniform draw from the population the
judge predicts on; every other label was chosen by hand (a dashboard label, a
lowest-similarity or filtered export, a row the analyst added).

When labels are imported, the export's manifest is found (:func:`manifest_beside` the
labelled file, inside a zip, or named by the caller) and read (:func:`read_label_manifest`);
:func:`shadoweval.export.labels_import.read_labelled` then sets
:attr:`shadoweval.records.HumanLabel.sample` to the sample's id on the label of each pair
the manifest lists, and leaves it ``None`` on the others.
"""

from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import orjson

from shadoweval.errors import ConfigError
from shadoweval.export.labels_import import READ_FORMATS, normalize_exchange_id
from shadoweval.records import MAX_SAMPLE_ID_CHARS

MANIFEST_NAME = "manifest.json"


@dataclass(frozen=True, slots=True)
class PpiSample:
    """A random label sample as its manifest lists it.

    Attributes:
        sample_id: the sample's id (``ppi-seed-<seed>-n-<N>`` or
            ``ppi-seed-<seed>-fraction-<F>``), set on the labels of its pairs.
        exchange_ids: every pair drawn (all task types).
    """

    sample_id: str
    exchange_ids: frozenset[str]


@dataclass(frozen=True, slots=True)
class LabelManifest:
    """What an export's manifest says about the labels read from it.

    Attributes:
        where: where it was read (a path, or ``<zip>:manifest.json``).
        run_id: the run exported.
        sample: the random label sample, ``None`` when the export was not one.
    """

    where: str
    run_id: str
    sample: PpiSample | None


def manifest_beside(file: Path) -> Path | None:
    """``manifest.json`` in the directory of ``file`` (where the export wrote it), or ``None``."""
    candidate = file.parent / MANIFEST_NAME
    return candidate if candidate.is_file() else None


def _bad(where: str, what: str, value: object) -> ConfigError:
    return ConfigError(f"manifest {where}: {what}", field="manifest", value=value)


def read_label_manifest(data: bytes, *, where: str) -> LabelManifest:
    """Read an export manifest's ``run_id`` and ``ppi_sample``.

    Args:
        data: the manifest's bytes (JSON).
        where: how to name it in messages.

    Raises:
        ConfigError: not a JSON object, no ``run_id`` text, or a ``ppi_sample`` that is
            not ``null`` or an object with an ``id`` (text of 1 to
            :data:`~shadoweval.records.MAX_SAMPLE_ID_CHARS` characters) and
            ``exchange_ids`` (a list of non-empty texts); the message names the field.
    """
    try:
        manifest = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise _bad(where, f"not JSON ({exc})", where) from None
    if not isinstance(manifest, dict):
        raise _bad(where, f"a JSON {type(manifest).__name__}, not an object", where)
    run_id = manifest.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise _bad(where, f"run_id {run_id!r} is not a run id", run_id)
    section = manifest.get("ppi_sample")
    if section is None:
        return LabelManifest(where=where, run_id=run_id, sample=None)
    if not isinstance(section, dict):
        raise _bad(where, f"ppi_sample {section!r} is not an object", section)
    sample_id = section.get("id")
    if (
        not isinstance(sample_id, str)
        or not sample_id.strip()
        or len(sample_id) > MAX_SAMPLE_ID_CHARS
    ):
        raise _bad(
            where,
            f"ppi_sample.id {sample_id!r} is not a sample id (text of 1 to "
            f"{MAX_SAMPLE_ID_CHARS} characters)",
            sample_id,
        )
    ids = section.get("exchange_ids")
    if not isinstance(ids, list) or not all(isinstance(i, str) and i.strip() for i in ids):
        raise _bad(where, "ppi_sample.exchange_ids is not a list of exchange ids", sample_id)
    sample = PpiSample(sample_id, frozenset(normalize_exchange_id(i) for i in ids))
    return LabelManifest(where=where, run_id=run_id, sample=sample)


def unpack_export_zip(archive: Path, into: Path) -> tuple[Path, bytes | None]:
    """Extract the samples file of an export zip (the dashboard's or the API's download)
    into the directory ``into``; return its path there and the zip's ``manifest.json``
    bytes (``None`` when the zip has none).

    The samples file is the member the manifest names (``file``), else the one member
    named ``samples.<csv|jsonl|parquet>`` (at any depth of the zip); it is written under
    its base name only.

    Raises:
        ConfigError: not a zip, no samples file, or several without a manifest naming one.
    """
    where = str(archive)
    try:
        with zipfile.ZipFile(archive) as zipped:
            members = [m for m in zipped.namelist() if not m.endswith("/")]
            by_name = {PurePosixPath(m).name: m for m in members}
            manifest = zipped.read(by_name[MANIFEST_NAME]) if MANIFEST_NAME in by_name else None
            named = _named_file(manifest)
            samples = [n for n in by_name if n.startswith("samples.") and n[8:] in READ_FORMATS]
            if named in by_name:
                samples = [named]
            if len(samples) != 1:
                raise ConfigError(
                    f"FILE {where!r}: the zip holds {len(samples)} samples files "
                    f"({', '.join(sorted(samples)) or 'none'}); expected one "
                    "samples.csv, samples.jsonl or samples.parquet",
                    field="file",
                    value=where,
                )
            target = into / samples[0]
            target.write_bytes(zipped.read(by_name[samples[0]]))
    except (zipfile.BadZipFile, OSError) as exc:
        raise ConfigError(
            f"FILE {where!r} cannot be read as a zip: {exc}", field="file", value=where
        ) from None
    return target, manifest


def _named_file(manifest: bytes | None) -> str | None:
    """The ``file`` a manifest names, when it is readable JSON naming one."""
    if manifest is None:
        return None
    try:
        value = orjson.loads(manifest)
    except orjson.JSONDecodeError:
        return None
    named = value.get("file") if isinstance(value, dict) else None
    return named if isinstance(named, str) else None
