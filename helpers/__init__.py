"""The textbook's library: every formula the chapters teach, once, checked against torch.

One package a floor, each importing only the floors below it: ``counting`` (the formulas),
``measuring``, ``decoder``, ``parallel`` (past one chip), ``serving``, ``widgets`` (drawing)
and ``programs``; ``book`` holds what every chapter shares (``setup()``, the checkers).
Import modules directly, e.g. ``from helpers.counting import flops, roofline``. Nothing heavy
is imported here, so ``import helpers`` is instant.
"""
