"""Model configurations: the numbers every count in the book starts from (chapter 1, `01_flops`).

A ``ModelConfig`` holds what a Llama-family decoder needs. Presets are copied from each
model's published Hugging Face ``config.json``; ``ModelConfig.from_hf_config`` reads such a
dict for the model types llama, qwen2 and mistral.

It also holds today's two departures from that family (chapter 10, past one chip): a
mixture of experts (MoE: each token's MLP is ``experts_per_token`` of ``n_experts`` small
MLPs picked by a router, beside ``shared_experts`` that every token uses, after
``dense_layers`` ordinary layers; model types mixtral, qwen3_moe, deepseek_v3) and
DeepSeek's multi-head latent attention (MLA: keys and values rebuilt from a
``kv_lora_rank``-wide latent that is all the cache keeps, beside a ``qk_rope_head_dim``-wide
shared rotary key). ``names()`` lists the dense presets that chapters 1–9 use;
``names("all")`` adds Mixtral-8x7B, Qwen3-30B-A3B and DeepSeek-V3. What the dense-only
code (``helpers.decoder``, the linear shapes of one uniform layer, the interview formulas)
cannot model it refuses with ``ModelConfig.require_dense``.

Besides the shapes, a config carries the two numbers that change a forward pass's values but
not its FLOPs or bytes: the RoPE base ``rope_theta`` and the RMSNorm ``rms_norm_eps``, and
Llama-3.1's ``"llama3"`` RoPE scaling (``RopeScaling``), which ``helpers.decoder`` applies as
transformers does (chapter 6, `06_ttft_tpot`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helpers.counting._validate import one_of, positive_int

__all__ = ["ModelConfig", "RopeScaling", "PRESETS", "get", "names", "layer_kinds"]

DENSE_MODEL_TYPES = ("llama", "qwen2", "mistral")
MOE_MODEL_TYPES = ("mixtral", "qwen3_moe", "deepseek_v3")
SUPPORTED_MODEL_TYPES = DENSE_MODEL_TYPES + MOE_MODEL_TYPES

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
    ``qk_norm``: an RMSNorm over each query and key head (Qwen3), ``head_dim`` weights each.

    Mixture of experts (chapter 10), all 0 for a dense model: ``n_experts`` routed experts,
    ``experts_per_token`` of them run per token, each a SwiGLU MLP of width
    ``expert_intermediate``; ``shared_experts`` more of that width run for every token;
    the first ``dense_layers`` layers have an ordinary MLP of width ``intermediate``.

    Multi-head latent attention (chapter 10), all 0 for ordinary attention: keys and values
    come from a ``kv_lora_rank``-wide latent per token (the cache keeps it and a
    ``qk_rope_head_dim``-wide rotary key shared by every head); each head's query and key
    are ``qk_nope_head_dim`` + ``qk_rope_head_dim`` wide (``head_dim`` is their sum), its
    value ``v_head_dim``; queries go through a ``q_lora_rank``-wide latent (0: one matrix).
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
    qk_norm: bool = False
    n_experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_experts: int = 0
    dense_layers: int = 0
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
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
        for field in ("n_experts", "experts_per_token", "expert_intermediate", "shared_experts",
                      "dense_layers", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim",
                      "qk_nope_head_dim", "v_head_dim"):  # fmt: skip
            value = getattr(self, field)
            if type(value) is not int or value < 0:
                raise ValueError(f"{self.name}: {field} must be an int >= 0, got {value!r}")
        if self.n_experts:
            if not 0 < self.experts_per_token <= self.n_experts:
                raise ValueError(
                    f"{self.name}: experts_per_token={self.experts_per_token} must be in "
                    f"1 … n_experts={self.n_experts}"
                )
            if not self.expert_intermediate:
                raise ValueError(f"{self.name}: a mixture of experts needs expert_intermediate")
            if self.dense_layers >= self.layers:
                raise ValueError(
                    f"{self.name}: dense_layers={self.dense_layers} leaves no MoE layer "
                    f"of {self.layers}"
                )
        elif self.experts_per_token or self.shared_experts or self.dense_layers:
            raise ValueError(
                f"{self.name}: experts_per_token, shared_experts and dense_layers need n_experts"
            )
        if self.kv_lora_rank:
            if not (self.qk_rope_head_dim and self.qk_nope_head_dim and self.v_head_dim):
                raise ValueError(
                    f"{self.name}: latent attention needs qk_rope_head_dim, qk_nope_head_dim "
                    "and v_head_dim"
                )
            if self.head_dim != self.qk_nope_head_dim + self.qk_rope_head_dim:
                raise ValueError(
                    f"{self.name}: head_dim={self.head_dim} must be qk_nope_head_dim + "
                    f"qk_rope_head_dim = {self.qk_nope_head_dim + self.qk_rope_head_dim}"
                )
        elif self.q_lora_rank or self.qk_rope_head_dim or self.qk_nope_head_dim or self.v_head_dim:
            raise ValueError(
                f"{self.name}: q_lora_rank and the rope/no-rope/value head widths need "
                "kv_lora_rank (latent attention)"
            )

    @property
    def is_moe(self) -> bool:
        """True for a mixture of experts (chapter 10)."""
        return self.n_experts > 0

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (chapter 10)."""
        return self.kv_lora_rank > 0

    @property
    def moe_layers(self) -> int:
        """Layers whose MLP is a mixture of experts (0 for a dense model)."""
        return self.layers - self.dense_layers if self.is_moe else 0

    def require_dense(self, what: str) -> None:
        """Raise ``ValueError`` if this config is not a plain dense decoder, naming ``what``
        (the function that models only those) and the features it would get wrong."""
        features = [label for label, present in (
            ("mixture of experts", self.is_moe), ("multi-head latent attention", self.is_mla))
            if present]  # fmt: skip
        if features:
            raise ValueError(
                f"{self.name}: {what} models dense decoders only; its "
                f"{' and '.join(features)} {'is' if len(features) == 1 else 'are'} not modelled "
                "there"
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
        """(in_features, out_features) of each weight matrix in one layer, and the LM head.

        Dense decoders only: the layers of a mixture of experts or of latent attention are
        not one uniform set of matrices (``helpers.counting.flops.forward_flops`` counts those).
        """
        self.require_dense("linear_shapes")
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
        """Read a Hugging Face ``config.json`` dict (model types llama, qwen2, mistral, and
        the mixtures of experts mixtral, qwen3_moe and deepseek_v3).

        Like ``transformers``, a missing ``num_key_value_heads`` means multi-head attention,
        a missing ``tie_word_embeddings`` means untied, and a missing ``rope_theta`` or
        ``rms_norm_eps`` takes transformers' default (10000.0 and 1e-6). ``rope_scaling`` (or
        transformers 5's ``rope_parameters``) of type "llama3" is read; other types raise,
        except DeepSeek-V3's "yarn", which changes values only and is not kept (nothing here
        runs DeepSeek-V3's forward pass: ``helpers.decoder`` refuses it). Mixtral's experts
        are ``intermediate_size`` wide; Qwen3-MoE and DeepSeek-V3 give
        ``moe_intermediate_size``. DeepSeek-V3's multi-token-prediction module
        (``num_nextn_predict_layers``) is not part of the model counted here, as in
        transformers. Anything else missing, an unknown model type, or a feature these
        formulas do not model (MoE layers at a stride, Qwen3's ``mlp_only_layers``) raises
        ``ValueError`` naming it.
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
        window = config.get("sliding_window") if model_type in ("mistral", "mixtral") else None
        if model_type in ("qwen2", "qwen3_moe") and config.get("use_sliding_window"):
            # Qwen's window applies only to layers past max_window_layers: not modelled.
            raise ValueError(f"use_sliding_window=true is not supported for {model_type}")
        # transformers 5 writes rope_parameters (theta inside); published files rope_theta.
        parameters = config.get("rope_parameters")
        if parameters is not None and not isinstance(parameters, Mapping):
            raise ValueError(f"rope_parameters must be a dict, got {type(parameters).__name__}")
        parameters = parameters or {}
        theta = config.get("rope_theta", parameters.get("rope_theta", DEFAULT_ROPE_THETA))
        scaling_dict = config.get("rope_scaling") or parameters or None
        if model_type == "deepseek_v3" and isinstance(scaling_dict, Mapping) and (
            scaling_dict.get("rope_type", scaling_dict.get("type")) == "yarn"
        ):
            scaling_dict = None
        scaling = RopeScaling.from_hf(scaling_dict)
        extra = _moe_and_mla_fields(model_type, config, need)
        if model_type == "deepseek_v3":
            head_dim = extra["qk_nope_head_dim"] + extra["qk_rope_head_dim"]
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
            **extra,
        )


LAYER_TYPES = ("full_attention", "sliding_attention")


def layer_kinds(layer_types: Sequence[str] | None, layers: int,
                window: int | None) -> tuple[int, int]:  # fmt: skip
    """(full layers, sliding layers) of a model of ``layers`` layers whose config lists
    ``layer_types``, one kind per layer as a Hugging Face config names them:
    ``"full_attention"`` (every key) or ``"sliding_attention"`` (the last ``window`` keys;
    Gemma 3 slides five layers in six). None: every layer slides when ``window`` is set,
    none otherwise (Mistral-7B-v0.1, the Llama presets)."""
    if layer_types is None:
        return (layers, 0) if window is None else (0, layers)
    if isinstance(layer_types, (str, bytes)) or not isinstance(layer_types, Sequence):
        raise ValueError(f"layer_types must be a list of layer kinds, got {layer_types!r}")
    if len(layer_types) != layers:
        raise ValueError(f"layer_types names {len(layer_types)} layers, the model has {layers}")
    for kind in layer_types:
        one_of(kind, LAYER_TYPES, "a layer type")
    sliding = list(layer_types).count("sliding_attention")
    if sliding and window is None:
        raise ValueError("a sliding_attention layer needs sliding_window")
    if sliding:
        positive_int(window, "sliding_window")
    return layers - sliding, sliding


def _moe_and_mla_fields(model_type: str, config: Mapping[str, Any], need: Any) -> dict[str, Any]:
    """The MoE and MLA fields of a mixtral, qwen3_moe or deepseek_v3 config (none for the
    dense types), in ``ModelConfig``'s names."""
    if model_type == "mixtral":
        return {"n_experts": need("num_local_experts"),
                "experts_per_token": need("num_experts_per_tok"),
                "expert_intermediate": need("intermediate_size")}  # fmt: skip
    if model_type == "qwen3_moe":
        if config.get("decoder_sparse_step", 1) != 1:
            raise ValueError("decoder_sparse_step other than 1 (MoE every few layers) is not "
                             "modelled")  # fmt: skip
        if config.get("mlp_only_layers"):
            raise ValueError("mlp_only_layers (dense layers among the MoE ones) is not modelled")
        return {"qk_norm": True, "n_experts": need("num_experts"),
                "experts_per_token": need("num_experts_per_tok"),
                "expert_intermediate": need("moe_intermediate_size")}  # fmt: skip
    if model_type == "deepseek_v3":
        if config.get("moe_layer_freq", 1) != 1:
            raise ValueError("moe_layer_freq other than 1 (MoE every few layers) is not modelled")
        return {"n_experts": need("n_routed_experts"),
                "experts_per_token": need("num_experts_per_tok"),
                "expert_intermediate": need("moe_intermediate_size"),
                "shared_experts": config.get("n_shared_experts") or 0,
                "dense_layers": config.get("first_k_dense_replace") or 0,
                "kv_lora_rank": need("kv_lora_rank"),
                "q_lora_rank": config.get("q_lora_rank") or 0,
                "qk_rope_head_dim": need("qk_rope_head_dim"),
                "qk_nope_head_dim": need("qk_nope_head_dim"),
                "v_head_dim": need("v_head_dim")}  # fmt: skip
    return {}


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
        # Mixtures of experts (chapter 10). Mixtral's experts are intermediate_size wide;
        # Qwen3-30B-A3B's intermediate_size (6144) is unused, every layer being MoE;
        # DeepSeek-V3's yarn rope_scaling is not kept (see from_hf_config).
        _preset("Mixtral-8x7B", _HF + "mistralai/Mixtral-8x7B-v0.1", model_type="mixtral",
                hidden=4096, intermediate=14336, layers=32, n_q_heads=32, n_kv_heads=8,
                head_dim=128, vocab=32000, tied_embeddings=False, qkv_bias=False,
                rope_theta=1000000.0, rms_norm_eps=1e-5, n_experts=8, experts_per_token=2,
                expert_intermediate=14336),
        _preset("Qwen3-30B-A3B", _HF + "Qwen/Qwen3-30B-A3B", model_type="qwen3_moe",
                hidden=2048, intermediate=6144, layers=48, n_q_heads=32, n_kv_heads=4,
                head_dim=128, vocab=151936, tied_embeddings=False, qkv_bias=False,
                rope_theta=1000000.0, rms_norm_eps=1e-6, qk_norm=True, n_experts=128,
                experts_per_token=8, expert_intermediate=768),
        _preset("DeepSeek-V3", _HF + "deepseek-ai/DeepSeek-V3", model_type="deepseek_v3",
                hidden=7168, intermediate=18432, layers=61, n_q_heads=128, n_kv_heads=128,
                head_dim=192, vocab=129280, tied_embeddings=False, qkv_bias=False,
                rope_theta=10000.0, rms_norm_eps=1e-6, n_experts=256, experts_per_token=8,
                expert_intermediate=2048, shared_experts=1, dense_layers=3, kv_lora_rank=512,
                q_lora_rank=1536, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128),
    )
}  # fmt: skip

FAMILIES = ("dense", "moe", "all")


def names(family: str = "dense") -> list[str]:
    """Names of the presets: the dense ones (the default: chapters 1–9 tabulate and offer
    these, and their decoder runs them), the mixtures of experts (``"moe"``), or ``"all"``."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(map(repr, FAMILIES))}, "
                         f"got {family!r}")  # fmt: skip
    return [name for name, cfg in PRESETS.items()
            if family == "all" or (family == "moe") == cfg.is_moe]  # fmt: skip


def get(name: str) -> ModelConfig:
    """A preset by name, e.g. ``get("Qwen2.5-7B")``."""
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}: presets are {', '.join(PRESETS)}") from None
