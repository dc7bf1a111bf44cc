"""The textbook's library: every formula the chapters teach, once, checked against torch.

Import modules directly, e.g. ``from helpers import flops, roofline``. Nothing heavy is
imported here, so ``import helpers`` is instant.
"""
