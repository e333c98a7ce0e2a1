"""The privacy primitives: what a guarantee is, which inputs are neighbours, the noise and its exact samplers,
the Gaussian release of a statistic, composition, and the ledger that charges every release and fit.

Nothing here knows a mechanism, a file format or the command line; everything above builds on it.
"""
