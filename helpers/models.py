"""Model configurations: the numbers every count in the book starts from (chapter 1, `01_flops`).

A ``ModelConfig`` holds what a Llama-family decoder needs. Presets are copied from each
model's published Hugging Face ``config.json``; ``ModelConfig.from_hf_config`` reads such a
dict for the model types llama, qwen2 and mistral.

Besides the shapes, a config carries the two numbers that change a forward pass's values but
not its FLOPs or bytes: the RoPE base ``rope_theta`` and the RMSNorm ``rms_norm_eps``, and
Llama-3.1's ``"llama3"`` RoPE scaling (``RopeScaling``), which ``helpers.decoder`` applies as
transformers does (chapter 6, `06_ttft_tpot`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ModelConfig", "RopeScaling", "PRESETS", "get", "names"]

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "mistral")

# transformers' defaults for these model types, used where a config.json leaves them out.
DEFAULT_ROPE_THETA = 10000.0
DEFAULT_RMS_NORM_EPS = 1e-6


@dataclass(frozen=True)
class RopeScaling:
    """Llama-3.1's ``rope_scaling`` with ``rope_type`` "llama3" (chapter 6).

    Rotary frequencies whose wavelength exceeds ``original_max_position_embeddings /
    low_freq_factor`` are divided by ``factor``; those shorter than ``… / high_freq_factor``
    are kept; those between are blended smoothly (transformers' ``_compute_llama3_parameters``).
    """

    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self) -> None:
        for field in ("factor", "low_freq_factor", "high_freq_factor",
                      "original_max_position_embeddings"):  # fmt: skip
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"rope_scaling: {field} must be a positive number, got {value!r}")
        if not self.high_freq_factor > self.low_freq_factor:
            raise ValueError(
                f"rope_scaling: high_freq_factor={self.high_freq_factor} must exceed "
                f"low_freq_factor={self.low_freq_factor}"
            )

    @classmethod
    def from_hf(cls, scaling: Mapping[str, Any] | None) -> RopeScaling | None:
        """Read a config.json ``rope_scaling`` (or transformers 5's ``rope_parameters``) dict.

        None or ``rope_type`` "default" means plain RoPE; "llama3" is modelled; any other
        type (linear, dynamic, yarn, …) raises ``ValueError`` naming it.
        """
        if scaling is None:
            return None
        if not isinstance(scaling, Mapping):
            raise ValueError(f"rope_scaling must be a dict or None, got {type(scaling).__name__}")
        kind = scaling.get("rope_type", scaling.get("type", "default"))
        if kind == "default":
            return None
        if kind != "llama3":
            raise ValueError(f"rope_scaling type {kind!r} is not modelled: only 'llama3' is")
        missing = [k for k in ("factor", "low_freq_factor", "high_freq_factor",
                               "original_max_position_embeddings") if k not in scaling]  # fmt: skip
        if missing:
            raise ValueError(f"llama3 rope_scaling is missing {', '.join(map(repr, missing))}")
        return cls(
            factor=scaling["factor"],
            low_freq_factor=scaling["low_freq_factor"],
            high_freq_factor=scaling["high_freq_factor"],
            original_max_position_embeddings=scaling["original_max_position_embeddings"],
        )

    def to_hf(self) -> dict[str, Any]:
        """The config.json form, ``rope_type`` included."""
        return {"rope_type": "llama3", "factor": self.factor,
                "low_freq_factor": self.low_freq_factor,
                "high_freq_factor": self.high_freq_factor,
                "original_max_position_embeddings": self.original_max_position_embeddings}


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only transformer of the Llama family (chapter 1, `01_flops`).

    ``head_dim`` is explicit: where a config has no ``head_dim`` field it is
    ``hidden // n_q_heads``. ``qkv_bias``: Qwen2 has biases on the q, k and v projections.
    ``gated_mlp``: SwiGLU (gate, up, down) rather than a two-matrix MLP.
    ``sliding_window``: tokens of KV cache kept per sequence (Mistral-7B-v0.1: 4096), or None.
    ``rope_theta`` (RoPE base), ``rms_norm_eps`` and ``rope_scaling`` change the values a
    forward pass computes, never its shapes, FLOPs or bytes (chapter 6).
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
    rope_theta: float = DEFAULT_ROPE_THETA
    rms_norm_eps: float = DEFAULT_RMS_NORM_EPS
    rope_scaling: RopeScaling | None = None
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
        if self.sliding_window is not None and (
            type(self.sliding_window) is not int or self.sliding_window <= 0
        ):
            raise ValueError(
                f"{self.name}: sliding_window must be a positive int or None, "
                f"got {self.sliding_window!r}"
            )
        for field in ("rope_theta", "rms_norm_eps"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{self.name}: {field} must be a positive number, got {value!r}")
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScaling):
            raise ValueError(
                f"{self.name}: rope_scaling must be a RopeScaling or None, "
                f"got {type(self.rope_scaling).__name__} (use RopeScaling.from_hf for a dict)"
            )

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

        Like ``transformers``, a missing ``num_key_value_heads`` means multi-head attention,
        a missing ``tie_word_embeddings`` means untied, and a missing ``rope_theta`` or
        ``rms_norm_eps`` takes transformers' default (10000.0 and 1e-6). ``rope_scaling`` (or
        transformers 5's ``rope_parameters``) of type "llama3" is read; other types raise.
        Anything else missing, an unknown model type, or a feature these formulas do not model
        raises ``ValueError`` naming it.
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
        if model_type == "qwen2" and config.get("use_sliding_window"):
            # Qwen2's window applies only to layers past max_window_layers: not modelled.
            raise ValueError("use_sliding_window=true is not supported for qwen2")
        # transformers 5 writes rope_parameters (theta inside); published files rope_theta.
        parameters = config.get("rope_parameters")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise ValueError(f"rope_parameters must be a dict, got {type(parameters).__name__}")
        parameters = parameters or {}
        theta = config.get("rope_theta", parameters.get("rope_theta", DEFAULT_ROPE_THETA))
        scaling = RopeScaling.from_hf(config.get("rope_scaling") or parameters or None)
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
            rope_theta=theta,
            rms_norm_eps=config.get("rms_norm_eps", DEFAULT_RMS_NORM_EPS),
            rope_scaling=scaling,
        )


def _preset(name: str, source: str, **fields_: Any) -> ModelConfig:
    return ModelConfig(name=name, source=source, **fields_)


# Every field below, rope_theta, rms_norm_eps and rope_scaling included, is copied from the
# config.json at https://huggingface.co/<repo>/blob/main/config.json for the repo named in
# the preset's source. Qwen2.5's files also list sliding_window with use_sliding_window=false:
# no window is used, so none is set here.
_HF = "Hugging Face config.json of "
# Llama-3.1-8B and -70B publish the same rope_scaling (rope_type "llama3").
_LLAMA31_ROPE = RopeScaling(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                            original_max_position_embeddings=8192)
PRESETS: dict[str, ModelConfig] = {
    cfg.name: cfg
    for cfg in (
        _preset("Qwen2.5-0.5B", _HF + "Qwen/Qwen2.5-0.5B", model_type="qwen2", hidden=896,
                intermediate=4864, layers=24, n_q_heads=14, n_kv_heads=2, head_dim=64,
                vocab=151936, tied_embeddings=True, qkv_bias=True, rope_theta=1000000.0,
                rms_norm_eps=1e-6),
        _preset("Qwen2.5-7B", _HF + "Qwen/Qwen2.5-7B", model_type="qwen2", hidden=3584,
                intermediate=18944, layers=28, n_q_heads=28, n_kv_heads=4, head_dim=128,
                vocab=152064, tied_embeddings=False, qkv_bias=True, rope_theta=1000000.0,
                rms_norm_eps=1e-6),
        _preset("Llama-3.1-8B", _HF + "meta-llama/Llama-3.1-8B", model_type="llama",
                hidden=4096, intermediate=14336, layers=32, n_q_heads=32, n_kv_heads=8,
                head_dim=128, vocab=128256, tied_embeddings=False, qkv_bias=False,
                rope_theta=500000.0, rms_norm_eps=1e-5, rope_scaling=_LLAMA31_ROPE),
        _preset("Llama-3.1-70B", _HF + "meta-llama/Llama-3.1-70B", model_type="llama",
                hidden=8192, intermediate=28672, layers=80, n_q_heads=64, n_kv_heads=8,
                head_dim=128, vocab=128256, tied_embeddings=False, qkv_bias=False,
                rope_theta=500000.0, rms_norm_eps=1e-5, rope_scaling=_LLAMA31_ROPE),
        _preset("Mistral-7B-v0.1", _HF + "mistralai/Mistral-7B-v0.1", model_type="mistral",
                hidden=4096, intermediate=14336, layers=32, n_q_heads=32, n_kv_heads=8,
                head_dim=128, vocab=32000, tied_embeddings=False, qkv_bias=False,
                sliding_window=4096, rope_theta=10000.0, rms_norm_eps=1e-5),
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
