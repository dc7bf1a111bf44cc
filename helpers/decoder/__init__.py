"""The book's decoder in torch (the model room): each module holds one idea.

- ``model``: the decoder itself (``Decoder``, its layers, ``random_decoder``);
- ``rope``: rotary position embeddings;
- ``masks``: which keys a token sees, and left-padded batches of prompts;
- ``kv_cache``: the contiguous ``KVCache`` and the paged ``PagedKVCache``;
- ``paged_step``: one ragged step's entries and index plan over a paged cache;
- ``split_kv``: Flash-Decoding's split-KV attention of a decode token;
- ``step_times``: timing ragged steps, what a step-time model is fitted to;
- ``phase_times``: chapter 6's TTFT and TPOT curves and a step's matmuls alone, timed;
- ``attention_times``: chapter 6's decode attention against its roof, plain and split.

Import from the module that defines a name (``from helpers.decoder.model import Decoder``):
this package re-exports nothing, so each name has one address.
"""
