"""What a database says about itself: column and category embeddings, ``metadata.json`` and
``manifest.json`` (stages ``embeddings`` and ``manifest`` of preprocessing)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dlkit.db import format as fmt
from dlkit.db.aggregates import AggregateMetadata
from dlkit.db.manifest import database_hash, hash_files, list_files, render_manifest
from dlkit.db.metadata_records import (
    ColumnMetadata,
    DatabaseMetadata,
    EmbeddingsMetadata,
    ForeignKeyMetadata,
    TableMetadata,
    TaskMetadata,
    metadata_bytes,
)
from dlkit.db.schema.spec import Schema
from dlkit.db.time_units import TimePosition
from dlkit.db.write.embed import EMBED_CHUNK, embed_texts
from dlkit.db.write.hashing import Hasher
from dlkit.db.write.plan import COMPOSITE, ColumnPlan, TablePlan
from dlkit.db.write.report import Progress, StageReport


def category_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def write_schema_embeddings(plans: list[TablePlan], embedder: Any, hasher: Hasher,
                            progress: Progress, st: StageReport) -> None:
    """``column_embeddings.bin`` and ``categorical_embeddings.bin``."""
    columns = [(p, c) for p in plans for c in p.columns]
    cats = [(c, v) for _p, c in columns if c.stype == fmt.CATEGORICAL
            for v in c.filled_categories()]
    col_texts = [f"{c.name} of {p.name}" for p, c in columns]
    cat_texts = [f"{c.name} is {category_text(v)}" for c, v in cats]
    for name, texts in ((fmt.COLUMN_EMBEDDINGS_FILE, col_texts),
                        (fmt.CATEGORICAL_EMBEDDINGS_FILE, cat_texts)):
        with hasher.open(name) as f:
            for start in range(0, len(texts), EMBED_CHUNK):
                chunk = texts[start:start + EMBED_CHUNK]
                f.write(embed_texts(embedder, chunk))
                progress.advance(len(chunk))
            st.bytes += f.size
    st.columns = len(columns)


def num_schema_embeddings(plans: list[TablePlan]) -> int:
    return sum(1 + (len(c.filled_categories()) if c.stype == fmt.CATEGORICAL else 0)
               for p in plans for c in p.columns)


def database_metadata(schema: Schema, plans: list[TablePlan], *, num_texts: int,
                      tasks: list[TaskMetadata], embedder: Any,
                      on_dangling: str,
                      aggregates: tuple[AggregateMetadata, ...] = ()) -> DatabaseMetadata:
    """The records of ``metadata.json``."""
    tables = tuple(TableMetadata(
        name=p.name, index=p.index, num_rows=p.num_rows, row_offset=p.row_offset,
        primary_key=p.primary_key, primary_key_type=p.pk_family, time_column=p.time_column,
        num_null_times=p.num_null_times,
        primary_key_part_types=p.pk_families if p.pk_family == COMPOSITE else (),
        foreign_keys=tuple(ForeignKeyMetadata(column=f.column, parent_table=f.parent,
                                              num_edges=f.num_edges, num_null=f.num_null,
                                              num_dangling=f.num_dangling, columns=f.parts)
                           for f in p.foreign_keys),
        columns=tuple(_column_metadata(c) for c in p.columns),
        time_unit=p.time_unit.value if p.time_unit is not None else None,
        time_position="end" if p.time_position is TimePosition.END else None) for p in plans)
    dim = int(embedder.dim)
    return DatabaseMetadata(
        database_id=schema.name, num_texts=num_texts, tables=tables, tasks=tuple(tasks),
        embeddings=EmbeddingsMetadata(embedder=embedder.name, config=embedder.config(),
                                      text_dim=dim, column_dim=dim, categorical_dim=dim),
        on_dangling=on_dangling, aggregates=aggregates)


def _column_metadata(c: ColumnPlan) -> ColumnMetadata:
    stats = c.stype in (fmt.NUMERIC, fmt.TIMESTAMP)
    categorical = c.stype == fmt.CATEGORICAL
    return ColumnMetadata(
        name=c.name, index=c.index, column_id=c.column_id, stype=c.stype,
        arrow_type=c.arrow_type, inferred=c.inferred, num_valid=c.num_valid,
        mean=c.mean if stats else None, std=c.std if stats else None,
        cat_emb_start=c.cat_emb_start if categorical else 0,
        categories=tuple(c.filled_categories()) if categorical else None,
        known_after_us=c.known_after_us)


def write_manifest(root: Path, hasher: Hasher, metadata: DatabaseMetadata,
                   st: StageReport) -> tuple[bytes, int]:
    """Write ``metadata.json``, then ``manifest.json`` over every file; returns the database
    hash and the total size of the database in bytes."""
    with hasher.open(fmt.METADATA_FILE) as f:
        f.write(metadata_bytes(metadata))
    file_map = hasher.digests()
    stray = sorted(set(list_files(root)) - set(file_map))
    if stray:  # never expected; hash them rather than publish an unlisted file
        file_map.update(hash_files(root, stray))
    file_map = {rel: file_map[rel] for rel in sorted(file_map)}
    digest = database_hash(file_map)
    data = render_manifest(file_map, digest)
    with open(root / fmt.MANIFEST_FILE, "wb") as f:
        f.write(data)
    st.bytes = file_map[fmt.METADATA_FILE]["size"] + len(data)
    return digest, sum(e["size"] for e in file_map.values()) + len(data)
