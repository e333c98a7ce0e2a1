"""Neural mechanisms (PyTorch; ``pip install privpix[neural]``). Importing this package does not import torch."""
