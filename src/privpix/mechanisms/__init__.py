"""Registered mechanisms. Importing this package registers every built-in mechanism."""

# Each import registers its mechanisms (dp_sgd imports torch and Opacus only when used).
from privpix.mechanisms import matrix, pca_inverse, pixel  # noqa: F401
from privpix.mechanisms.base import (
    About,
    Auditable,
    Capabilities,
    Claim,
    ConformanceCase,
    FeatureRelease,
    Mechanism,
    ModelFile,
    Param,
    RecordRelease,
    Release,
    takes_delta,
)
from privpix.mechanisms.kinds import (
    KINDS,
    FeatureMechanism,
    ImageMechanism,
    LearnerSpec,
    ModelMechanism,
    RecordMechanism,
    SyntheticImageMechanism,
    require_kind,
)
from privpix.mechanisms.ldp import image, mechanism  # noqa: F401  (registers)
from privpix.mechanisms.neural import (  # noqa: F401  (registers; imports torch only when used)
    ae,
    dp_sgd,
    gan,
)
from privpix.mechanisms.params import param
from privpix.mechanisms.registry import (
    ALIASES,
    MECHANISMS,
    fit_as_declared,
    get_mechanism,
    load_plugins,
    mechanism_class,
    parse_method_spec,
    ready_mechanism,
    register,
)
from privpix.mechanisms.synthesis import dp_merf  # noqa: F401  (registers; imports torch only when used)

__all__ = [
    "ALIASES",
    "KINDS",
    "MECHANISMS",
    "About",
    "Auditable",
    "Capabilities",
    "Claim",
    "ConformanceCase",
    "FeatureMechanism",
    "FeatureRelease",
    "ImageMechanism",
    "LearnerSpec",
    "Mechanism",
    "ModelFile",
    "ModelMechanism",
    "Param",
    "RecordMechanism",
    "RecordRelease",
    "Release",
    "SyntheticImageMechanism",
    "fit_as_declared",
    "get_mechanism",
    "load_plugins",
    "mechanism_class",
    "param",
    "parse_method_spec",
    "ready_mechanism",
    "register",
    "require_kind",
    "takes_delta",
]

# Mechanisms of other installed packages (entry-point group ``privpix.mechanisms``), after the built-ins.
load_plugins()
