"""PPSGAN selective feature anonymization (Kim & Yang 2020), with PPAPNet and ACGAN baselines (PyTorch, CPU).

Networks (§3.1), for (c, h, w) images with h, w ∈ {28, 32}:

* encoder G_e: four 5×5 stride-2 convolutions (``width``, 2·, 4·, 8·``width`` channels), each with batch norm
  and LeakyReLU(0.2), then a dense layer to z ∈ R^d. The paper's ``width = 128`` gives its 4096 × d dense layer;
  a smaller width trains on a CPU.
* decoder G_d: dense d → 8·width × 2 × 2, four 5×5 stride-2 transposed convolutions back to (c, h, w), batch norm
  and LeakyReLU after the first three, sigmoid after the last.
* critic C_d and classifier C_c: one shared trunk of four 5×5 stride-2 convolutions with batch norm and LeakyReLU,
  then a dense layer to 1 (real/fake, sigmoid) and one to the classes (softmax).

Noise amplifier N_a (§3.2): approximate sensitivity ``s_e = max_{i,j} |G_e(x_i) − G_e(x_j)|`` elementwise over the
training set, which equals ``max_i z_i − min_i z_i`` per coordinate (one pass, no pair loop); σ* =
√(2 log(1.25/δ))·s_e/ε (α ~ N(0, 1)) or s_e/ε when δ = 0 (α ~ Lap(0, 1)); the attention matrix
``A = softmax(z zᵀ/√d)`` (d × d per image, rows sum to 1) and ``z̃ = A z + (J − A)(α ∘ σ*)``. PPAPNet (Kim and
Yang 2019) adds ``α ∘ σ*`` to the whole of z, without attention.

Training (Algorithm 1): a pretrained autoencoder initialises G_e and G_d; then per generator step ``n_critic``
critic steps on ``L_d + L_c`` (sigmoid and softmax cross-entropy on a real batch x′ and an anonymized batch x̃),
and one generator step on ``L_c(x̃) − L_d(x̃) + ‖x − G_d(G_e(x))‖²`` (the zero-noise penalty through the skip
connection G_e → G_d), AdamW (lr 1e-4, weight decay 1e-4, β = (0.5, 0.9)).

ACGAN (§4.1): G_d fed with U[−1, 1]^d noise and a one-hot class, trained against the same critic–classifier.

Guarantee: none. ε and δ only scale the noise; s_e is computed from the training images and the attention
reweights the noise per image, so no (ε, δ)-DP statement follows. privpix marks every release ``empirical``.
"""

from privpix.mechanisms.neural.ppsgan.classifier import TrunkClassifier
from privpix.mechanisms.neural.ppsgan.files import load_model, save_model
from privpix.mechanisms.neural.ppsgan.networks import (
    FORMAT,
    KINDS,
    RECIPES,
    approximate_sensitivity,
    as_tensor,
    attention,
    build_networks,
    sigma_star,
)
from privpix.mechanisms.neural.ppsgan.release import anonymize, latent_noise_budget
from privpix.mechanisms.neural.ppsgan.training import train_ppsgan

__all__ = [
    "FORMAT",
    "KINDS",
    "RECIPES",
    "TrunkClassifier",
    "anonymize",
    "approximate_sensitivity",
    "as_tensor",
    "attention",
    "build_networks",
    "latent_noise_budget",
    "load_model",
    "save_model",
    "sigma_star",
    "train_ppsgan",
]
