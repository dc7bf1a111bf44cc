"""Past one chip (chapter 10): the arithmetic of splitting a model over T chips (``sharding``),
the split run for real over torch.distributed (``distributed``), and what a token costs
(``cost``)."""
