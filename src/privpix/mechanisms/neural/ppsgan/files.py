"""The model file of a trained generator: weights and a JSON description, no pickled code."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from privpix.mechanisms.neural.ppsgan.networks import (
    FORMAT,
    build_networks,
)


def save_model(path: str | Path, gen, meta: dict) -> Path:
    """One file: generator weights + JSON meta (shape, d, width, classes, ε, δ, training record)."""
    from privpix.mechanisms.modelfile import save_model_file

    full = {"format": FORMAT, "kind": gen.kind, "classes": [int(c) for c in gen.classes_], **meta}
    return save_model_file(path, gen.state_dict(), full)


def load_model(path: str | Path):
    """(generator, meta) from :func:`save_model`; weights only (``weights_only=True``)."""
    from privpix.mechanisms.modelfile import build_from_file, load_model_file

    state, meta = load_model_file(path, FORMAT, "PPSGAN")

    def build():
        from privpix import training

        # A throwaway generator for the weights the file replaces: loading leaves torch's global RNG alone.
        shape, n_classes = tuple(meta["shape"]), len(meta["classes"])
        gen, _ = build_networks(
            meta["kind"], shape, meta["d"], meta["width"], n_classes, generator=training.generator(0)
        )
        gen.load_state_dict(state)
        gen.classes_ = np.asarray(meta["classes"])
        return gen

    gen = build_from_file(path, "PPSGAN", build)
    gen.eval()
    return gen, meta
