"""Evaluation: utility (PCA + SVM), quality (PSNR, SSIM, entropy) and the one grid (evaluate)."""

from privpix.evaluation.grid import evaluate
from privpix.evaluation.quality import entropy, psnr, ssim
from privpix.evaluation.utility import PROTOCOLS, UtilityScores, pca_svm_scores, utility

__all__ = ["PROTOCOLS", "UtilityScores", "entropy", "evaluate", "pca_svm_scores", "psnr", "ssim", "utility"]
