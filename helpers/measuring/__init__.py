"""Measuring on this device: the machine, timing, the ceilings, kernels and the sweeps of
chapters 4 and 5, and what a real GPU measured, read back. torch is imported inside functions."""
