"""Plausible wrong answers to each chapter's exercises, one module per chapter."""
