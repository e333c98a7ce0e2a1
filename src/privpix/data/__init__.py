"""Datasets: staged real datasets in their original formats, built-in offline sets, and image folders."""

from privpix.data.files import DEFAULT_MAX_PIXELS, read_image, set_mode
from privpix.data.folders import iter_folder, list_image_files, load_folder
from privpix.data.imageset import ImageSet, RecordSet
from privpix.data.load import load_dataset
from privpix.data.loaders import (
    DATASETS,
    ENV_VAR,
    DatasetInfo,
    celeba_64,
    parse_dataset_spec,
    resolve_data_dir,
)
from privpix.data.pairs import load_pair

__all__ = [
    "DATASETS",
    "DEFAULT_MAX_PIXELS",
    "ENV_VAR",
    "DatasetInfo",
    "ImageSet",
    "RecordSet",
    "celeba_64",
    "iter_folder",
    "list_image_files",
    "load_dataset",
    "load_folder",
    "load_pair",
    "parse_dataset_spec",
    "read_image",
    "resolve_data_dir",
    "set_mode",
]
