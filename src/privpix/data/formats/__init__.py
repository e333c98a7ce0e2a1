"""Dataset formats in and out: ImageFolder PNGs, Parquet (Hugging Face ``Image`` struct), WebDataset tar shards.

Writing (one release, cut into shards that worker processes write independently into a staging folder)::

    written = write_shard("parquet", stage, shard, n_shards, items)   # per shard, any order, any process
    index_files = finish("parquet", stage, all_rows_in_release_order) # once, after every shard

Reading (random access by index range, in worker processes: a source holds paths and small indexes, never
pixels)::

    source = open_source("photos/")          # a folder of images, *.parquet, *.tar, or a privpix release
    batch = source.read(0, 256)              # ImageSet: uint8 (n, h, w, c), labels, names
    source = dataset_source("celeba:test")   # a registered dataset, read lazily from its files when possible

docs/formats.md has the layouts and how to load each with ``datasets``, torch and ``webdataset``.
"""

from privpix.data.formats.base import (
    FORMATS,
    METADATA,
    PARQUET_ROW_GROUP,
    ImageSource,
    Item,
    Written,
    check_class_names,
    check_format,
)
from privpix.data.formats.opening import dataset_source, open_source
from privpix.data.formats.writing import finish, shard_file, write_shard

__all__ = [
    "FORMATS",
    "METADATA",
    "PARQUET_ROW_GROUP",
    "ImageSource",
    "Item",
    "Written",
    "check_class_names",
    "check_format",
    "dataset_source",
    "finish",
    "open_source",
    "shard_file",
    "write_shard",
]
