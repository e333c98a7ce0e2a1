"""Datasets: staged real datasets in their original formats, built-in offline sets, and image folders."""

from privpix.data.files import DEFAULT_MAX_PIXELS, read_image, set_mode
from privpix.data.imageset import ImageSet, RecordSet
from privpix.data.loaders import (
    DATASETS,
    ENV_VAR,
    DatasetInfo,
    iter_folder,
    list_image_files,
    load_dataset,
    load_folder,
    parse_dataset_spec,
    resolve_data_dir,
)

__all__ = [
    "DATASETS",
    "DEFAULT_MAX_PIXELS",
    "ENV_VAR",
    "DatasetInfo",
    "ImageSet",
    "RecordSet",
    "iter_folder",
    "list_image_files",
    "load_dataset",
    "load_folder",
    "parse_dataset_spec",
    "read_image",
    "resolve_data_dir",
    "set_mode",
]
