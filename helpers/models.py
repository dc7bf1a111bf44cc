"""Model configurations: the numbers every count in the book starts from (chapter 1, `01_flops`).

A ``ModelConfig`` holds what a Llama-family decoder needs. Presets are copied from each
model's published Hugging Face ``config.json``; ``ModelConfig.from_hf_config`` reads such a
dict for the model types llama, qwen2 and mistral.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ModelConfig", "PRESETS", "get", "names"]

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer of the Llama family (chapter 1, `01_flops`).

    ``head_dim`` is explicit: where a config has no ``head_dim`` field it is
    ``hidden // n_q_heads``. ``qkv_bias``: Qwen2 has biases on the q, k and v projections.
    ``gated_mlp``: SwiGLU (gate, up, down) rather than a two-matrix MLP.
    ``sliding_window``: tokens of KV cache kept per sequence (Mistral-7B-v0.1: 4096), or None.
    """

    name: str
    model_type: str
    hidden: int
    intermediate: int
    layers: int
    n_q_heads: int
    n_kv_heads: int
    head_dim: int
    vocab: int
    tied_embeddings: bool
    qkv_bias: bool
    gated_mlp: bool = True
    sliding_window: int | None = None
    source: str = ""

    def __post_init__(self) -> None:
        for field in ("hidden", "intermediate", "layers", "n_q_heads", "n_kv_heads", "head_dim",
                      "vocab"):  # fmt: skip
            value = getattr(self, field)
            if type(value) is not int or value <= 0:
                raise ValueError(f"{self.name}: {field} must be a positive int, got {value!r}")
        if self.n_q_heads % self.n_kv_heads:
            raise ValueError(
                f"{self.name}: n_kv_heads={self.n_kv_heads} does not divide "
                f"n_q_heads={self.n_q_heads} (grouped-query attention needs whole groups)"
            )
        if self.sliding_window is not None and self.sliding_window <= 0:
            raise ValueError(f"{self.name}: sliding_window must be positive or None")

    @property
    def q_dim(self) -> int:
        """Width of the query projection's output: n_q_heads · head_dim."""
        return self.n_q_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of each of the key and value projections' outputs: n_kv_heads · head_dim."""
        return self.n_kv_heads * self.head_dim

    @property
    def group_size(self) -> int:
        """Query heads sharing one key/value head (1 = multi-head attention)."""
        return self.n_q_heads // self.n_kv_heads

    def linear_shapes(self) -> dict[str, tuple[int, int]]:
        """(in_features, out_features) of each weight matrix in one layer, and the LM head."""
        shapes = {
            "q": (self.hidden, self.q_dim),
            "k": (self.hidden, self.kv_dim),
            "v": (self.hidden, self.kv_dim),
            "o": (self.q_dim, self.hidden),
        }
        if self.gated_mlp:
            shapes["gate"] = (self.hidden, self.intermediate)
        shapes["up"] = (self.hidden, self.intermediate)
        shapes["down"] = (self.intermediate, self.hidden)
        shapes["lm_head"] = (self.hidden, self.vocab)
        return shapes

    @classmethod
    def from_hf_config(cls, config: Mapping[str, Any], name: str | None = None) -> ModelConfig:
        """Read a Hugging Face ``config.json`` dict (model types llama, qwen2, mistral).

        Like ``transformers``, a missing ``num_key_value_heads`` means multi-head attention
        and a missing ``tie_word_embeddings`` means untied. Anything else missing, an unknown
        model type, or a feature these formulas do not model raises ``ValueError`` naming it.
        """
        if not isinstance(config, Mapping):
            raise ValueError(f"config must be a dict, got {type(config).__name__}")
        model_type = config.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"unknown model_type {model_type!r}: "
                f"supported are {', '.join(SUPPORTED_MODEL_TYPES)}"
            )

        def need(key: str) -> Any:
            if config.get(key) is None:
                raise ValueError(f"{model_type} config is missing required field {key!r}")
            return config[key]

        for unsupported in ("attention_bias", "mlp_bias"):
            if config.get(unsupported):
                raise ValueError(f"{unsupported}=true is not supported by these formulas")
        hidden, n_q = need("hidden_size"), need("num_attention_heads")
        head_dim = config.get("head_dim")
        if head_dim is None:
            if hidden % n_q:
                raise ValueError(
                    f"hidden_size={hidden} is not divisible by num_attention_heads={n_q}"
                )
            head_dim = hidden // n_q
        window = config.get("sliding_window") if model_type == "mistral" else None
        return cls(
            name=name or config.get("_name_or_path") or model_type,
            model_type=model_type,
            hidden=hidden,
            intermediate=need("intermediate_size"),
            layers=need("num_hidden_layers"),
            n_q_heads=n_q,
            n_kv_heads=config.get("num_key_value_heads") or n_q,
            head_dim=head_dim,
            vocab=need("vocab_size"),
            tied_embeddings=bool(config.get("tie_word_embeddings", False)),
            qkv_bias=model_type == "qwen2",
            sliding_window=window,
        )


def _preset(name: str, source: str, **fields_: Any) -> ModelConfig:
    return ModelConfig(name=name, source=source, **fields_)


_HF = "Hugging Face config.json of "
PRESETS: dict[str, ModelConfig] = {
    cfg.name: cfg
    for cfg in (
        _preset("Qwen2.5-0.5B", _HF + "Qwen/Qwen2.5-0.5B", model_type="qwen2", hidden=896,
                intermediate=4864, layers=24, n_q_heads=14, n_kv_heads=2, head_dim=64,
                vocab=151936, tied_embeddings=True, qkv_bias=True),
        _preset("Qwen2.5-7B", _HF + "Qwen/Qwen2.5-7B", model_type="qwen2", hidden=3584,
                intermediate=18944, layers=28, n_q_heads=28, n_kv_heads=4, head_dim=128,
                vocab=152064, tied_embeddings=False, qkv_bias=True),
        _preset("Llama-3.1-8B", _HF + "meta-llama/Llama-3.1-8B", model_type="llama",
                hidden=4096, intermediate=14336, layers=32, n_q_heads=32, n_kv_heads=8,
                head_dim=128, vocab=128256, tied_embeddings=False, qkv_bias=False),
        _preset("Llama-3.1-70B", _HF + "meta-llama/Llama-3.1-70B", model_type="llama",
                hidden=8192, intermediate=28672, layers=80, n_q_heads=64, n_kv_heads=8,
                head_dim=128, vocab=128256, tied_embeddings=False, qkv_bias=False),
        _preset("Mistral-7B-v0.1", _HF + "mistralai/Mistral-7B-v0.1", model_type="mistral",
                hidden=4096, intermediate=14336, layers=32, n_q_heads=32, n_kv_heads=8,
                head_dim=128, vocab=32000, tied_embeddings=False, qkv_bias=False,
                sliding_window=4096),
    )
}  # fmt: skip


def names() -> list[str]:
    """Names of the presets."""
    return list(PRESETS)


def get(name: str) -> ModelConfig:
    """A preset by name, e.g. ``get("Qwen2.5-7B")``."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}: presets are {', '.join(PRESETS)}") from None
