"""The formulas: FLOPs, bytes, the roofline and what they say of prefill and decode.

Pure Python with no torch at import; each formula once, its docstring naming the chapter
(chapters 1-3, and the roofline side of 5-10)."""
