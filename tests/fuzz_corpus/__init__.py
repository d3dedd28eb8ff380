"""Corpus of real PyTorch Inductor CPU silent wrong-result bugs, kept as runnable fixtures."""
