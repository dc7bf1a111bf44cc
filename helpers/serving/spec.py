"""Speculative decoding, every formula of it in one room: the closed forms of Leviathan et
al. (tokens a pass, speedup, the best γ; chapter 8), the largest batch at which it pays
(``verify_costs``, ``spec_largest_batch``; chapter 8), real rejection sampling to check them
(``spec_monte_carlo``), its TPOT on the roofline step model (``spec_tpot``; chapter 9) and
greedy verification of a padded batch of drafts from one target pass's logits
(``greedy_verify``; chapter 9)."""

from __future__ import annotations

import math

import numpy as np
import torch

from helpers.counting._validate import non_negative_int, positive_int
from helpers.counting.flops import attention_flops_per_key, decode_flops_split
from helpers.counting.hardware import HardwareSpec
from helpers.counting.memory import dtype_bytes, kv_cache_bytes, weight_bytes
from helpers.counting.models import ModelConfig
from helpers.serving.steps import RooflineSteps, Step

# ------------------------------------------------------ the closed forms (chapters 8, 9)
# Leviathan, Kalman and Matias, "Fast Inference from Transformers via Speculative Decoding"
# (ICML 2023, arXiv 2211.17192). ``spec_monte_carlo`` below samples what they summarise.


def _check_spec(alpha: float, gamma: int) -> None:
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha (acceptance rate) must be in [0, 1], got {alpha!r}")
    if type(gamma) is not int or gamma < 0:
        raise ValueError(f"gamma (draft tokens per pass) must be an int >= 0, got {gamma!r}")


def spec_expected_tokens(alpha: float, gamma: int) -> float:
    """Expected tokens per target pass, (1 − α^{γ+1}) / (1 − α) (Leviathan et al. 2023, eq. 1).

    The draft proposes γ tokens; each is accepted with probability α, independently, and the
    pass always yields one more token (the target's correction, or a bonus one when all γ are
    accepted): 1 + α + … + α^γ. At α = 1 that sum is γ + 1 (chapter 8).
    """
    _check_spec(alpha, gamma)
    if alpha == 1:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def spec_speedup(alpha: float, gamma: int, c: float) -> float:
    """Walltime speedup over plain decoding, (1 − α^{γ+1}) / ((1 − α)(γc + 1)) (Leviathan et
    al. 2023, Theorem 3.8): the expected tokens of one pass over its cost, γ draft steps at c
    target steps each plus one target pass. c = draft step time / target step time. It
    assumes the target's pass over γ + 1 tokens costs one decode step, which holds while
    decode is memory-bound (chapters 3 and 8).
    """
    if not c >= 0:
        raise ValueError(f"c (draft cost over target cost) must be >= 0, got {c!r}")
    return spec_expected_tokens(alpha, gamma) / (gamma * c + 1)


def spec_best_gamma(alpha: float, c: float, max_gamma: int = 64) -> int:
    """The γ in 0 … ``max_gamma`` that maximises ``spec_speedup`` (the smallest on a tie).

    Drafting one more token pays while α^(γ+1), the chance it is still wanted, beats c·σ(γ),
    its draft step's cost against the tokens a pass already yields (σ(γ) =
    ``spec_expected_tokens``); at α = 0.8, c = 0.05 the best is γ = 8, 3.09× (chapter 8),
    where the shortcut α^γ > c would draft up to 13.
    """
    _check_spec(alpha, max_gamma)
    speedups = [spec_speedup(alpha, gamma, c) for gamma in range(max_gamma + 1)]
    return max(range(max_gamma + 1), key=lambda gamma: (speedups[gamma], -gamma))


# ------------------------------------------------ speculation at large batch (chapter 8)


def verify_costs(cfg: ModelConfig, hw: HardwareSpec, context: int,
                 dtype: str = "bf16") -> dict[str, float]:  # fmt: skip
    """The inputs of ``spec_largest_batch`` for ``cfg`` on ``hw`` at ``context`` cached
    tokens a sequence (chapter 8): the weights a pass reads (all but an untied input
    embedding table, of which it reads only a row a token) and the linear layers' and LM
    head's FLOPs a token (``flops.decode_flops_split``: 2 × the parameters that multiply),
    one sequence's KV bytes and one query's attention FLOPs over them
    (``flops.attention_flops_per_key`` × context), peak and bandwidth."""
    positive_int(context, "context")
    cfg.require_dense("verify_costs")
    unread = 0 if cfg.tied_embeddings else cfg.vocab * cfg.hidden  # the input table
    return {
        "weight_bytes": float(weight_bytes(cfg, dtype) - unread * dtype_bytes(dtype)),
        "linear_flops": float(decode_flops_split(cfg, 1)[1]),
        "kv_bytes": float(kv_cache_bytes(cfg, context, dtype=dtype)),
        "attention_flops": float(attention_flops_per_key(cfg) * context),
        "peak": float(hw.peak(dtype)),
        "bandwidth": float(hw.bandwidth),
    }


def spec_largest_batch(costs: dict[str, float], alpha: float, gamma: int, c: float,
                       max_batch: int) -> int:  # fmt: skip
    """The largest batch in 1 … ``max_batch`` at which speculative decoding lowers TPOT,
    0 if none (chapter 8's exercise reference).

    A target pass over ``k`` queries a sequence at batch B takes, on the roofline part by
    part, max(k·B·linear_flops/peak, weight_bytes/bandwidth) for the linear layers (the
    weights read once for every query) plus max(k·B·attention_flops/peak,
    B·kv_bytes/bandwidth) for attention (each sequence's cache read once for its k
    queries). Plain decode costs the pass at k = 1 a token; speculation costs γ draft steps
    of ``c`` times that each plus the pass at k = γ + 1, over
    ``spec_expected_tokens(alpha, gamma)`` tokens. It pays where strictly lower.
    """
    non_negative_int(gamma, "gamma")
    positive_int(max_batch, "max_batch")
    peak, bandwidth = costs["peak"], costs["bandwidth"]

    def pass_seconds(batch: int, queries: int) -> float:
        linear = max(queries * batch * costs["linear_flops"] / peak,
                     costs["weight_bytes"] / bandwidth)  # fmt: skip
        attention = max(queries * batch * costs["attention_flops"] / peak,
                        batch * costs["kv_bytes"] / bandwidth)  # fmt: skip
        return linear + attention

    tokens = spec_expected_tokens(alpha, gamma)
    best = 0
    for batch in range(1, max_batch + 1):
        plain = pass_seconds(batch, 1)
        if (gamma * c * plain + pass_seconds(batch, gamma + 1)) / tokens < plain:
            best = batch
    return best


# ----------------------------------------------------------------- rejection sampling


def random_draft_pair(vocab: int, alpha: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A random target distribution p over ``vocab`` tokens and a draft q with acceptance
    rate Σ min(p, q) = ``alpha`` (chapter 8). q mixes p with an unrelated random r,
    q = λp + (1 − λ)r; the overlap rises with λ, so bisection finds the λ that gives α."""
    positive_int(vocab, "vocab")
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(vocab))
    r = rng.dirichlet(np.full(vocab, 0.1))

    def overlap(lam: float) -> float:
        return float(np.minimum(p, lam * p + (1 - lam) * r).sum())

    if not overlap(0.0) <= alpha <= 1:
        raise ValueError(f"alpha must be in [{overlap(0.0):.3f}, 1] for this pair, got {alpha!r}")
    low, high = 0.0, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if overlap(middle) < alpha else (low, middle)
    lam = (low + high) / 2
    return p, lam * p + (1 - lam) * r


def spec_monte_carlo(
    p: np.ndarray, q: np.ndarray, gamma: int, trials: int = 200_000, seed: int = 0
) -> dict[str, float | np.ndarray]:
    """Run speculative sampling's verification ``trials`` times (Leviathan et al. 2023,
    Algorithm 1; chapter 8) and count what each target pass yields.

    Each trial drafts γ tokens from q; draft token x is kept with probability
    min(1, p(x)/q(x)) until the first rejection, which is replaced by a sample of the
    residual norm(max(0, p − q)); if all γ are kept the target adds one more. Every
    position uses the same (p, q), so acceptances are independent with rate α = Σ min(p, q),
    the assumption behind ``spec_expected_tokens``. Returns the mean tokens per
    pass, α, the observed acceptance rate, and the empirical distribution of the first
    token emitted (rejection sampling makes it p exactly).
    """
    non_negative_int(gamma, "gamma")
    positive_int(trials, "trials")
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    if p.shape != q.shape or p.ndim != 1:
        raise ValueError(f"p and q must be vectors of one shape, got {p.shape} and {q.shape}")
    for name, dist in (("p", p), ("q", q)):
        if (dist < 0).any() or not math.isclose(dist.sum(), 1.0, rel_tol=1e-9):
            raise ValueError(f"{name} must be a probability distribution")
    rng = np.random.default_rng(seed)
    vocab = len(p)

    def draw(dist: np.ndarray, size: int | tuple[int, int]) -> np.ndarray:
        cdf = np.cumsum(dist)
        return np.minimum(np.searchsorted(cdf, rng.random(size) * cdf[-1], side="right"),
                          vocab - 1)  # fmt: skip

    alpha = float(np.minimum(p, q).sum())
    if gamma == 0:
        first = draw(p, trials)
        tokens = np.ones(trials)
        accepted_rate = math.nan
    else:
        drafts = draw(q, (trials, gamma))
        accept = rng.random((trials, gamma)) * q[drafts] < p[drafts]
        kept = np.where(accept.all(axis=1), gamma, np.argmin(accept, axis=1))
        tokens = kept + 1
        residual = np.maximum(p - q, 0)
        first = np.where(accept[:, 0], drafts[:, 0], draw(residual / residual.sum(), trials)) \
            if residual.sum() > 0 else drafts[:, 0]  # fmt: skip
        accepted_rate = float(accept.mean())
    return {
        "tokens_per_pass": float(tokens.mean()),
        "alpha": alpha,
        "accepted_rate": accepted_rate,
        "first_token_distribution": np.bincount(first, minlength=vocab) / trials,
    }


def spec_tpot(target: ModelConfig, draft: ModelConfig, hw: HardwareSpec, batch: int,
              context: int, alpha: float, gamma: int, dtype: str = "bf16") -> float:  # fmt: skip
    """Seconds per output token of ``batch`` streams at ``context`` tokens under speculative
    decoding, on the roofline step model (chapter 9): ``gamma`` draft decode steps, then one
    target pass over gamma + 1 tokens a sequence, over the tokens a pass yields on average
    (``spec_expected_tokens``). gamma = 0 is a plain decode step."""
    positive_int(batch, "batch")
    non_negative_int(gamma, "gamma")
    decode = Step((), batch, batch * context, batch)
    drafting = gamma * RooflineSteps(draft, hw, dtype)(decode) if gamma else 0.0
    verify = RooflineSteps(target, hw, dtype)(
        Step(((gamma + 1, context),) * batch, 0, 0, batch * (gamma + 1)))
    return float((drafting + verify) / spec_expected_tokens(alpha, gamma))


def greedy_verify(logits: torch.Tensor, drafts: torch.Tensor, lengths: torch.Tensor,
                  stop: int | None = None) -> tuple[list[list[int]], int]:  # fmt: skip
    """The tokens one target pass over a batch vouches for under greedy decoding (chapter 9).

    ``drafts`` [B, γ] (long), padded: sequence b drafted ``drafts[b, :lengths[b]]`` and the
    rest of its row is padding, never compared. ``lengths`` [B] (long), each in 0 … γ.
    ``logits`` [B, γ + 1, V]: the target's logits from one pass over each sequence's last
    accepted token followed by its row of drafts, so row j scores the token after the j-th
    of those inputs (a causal model's logits at a position score the next token). Greedy
    decoding would emit argmax(row 0); draft j < lengths[b] stands while it equals
    argmax(row j) and every draft before it stood; the pass then adds the target's own
    argmax at the first draft that fell, or at row lengths[b] when none did (the bonus).
    ``stop``, an end-of-sequence token or None: a sequence's tokens end at the first stop
    token, which is kept.

    Returns (emitted, accepted): per sequence the 1 … lengths[b] + 1 tokens the target alone
    would have produced next, exactly what serial greedy decoding gives, from one pass
    (Leviathan et al.'s rule at temperature 0); and how many of them, over the batch, are
    drafts (the bonus and the target's token at a fallen draft are not)."""
    if logits.dim() != 3 or drafts.dim() != 2 or lengths.shape != drafts.shape[:1] or (
            logits.shape[:2] != (drafts.shape[0], drafts.shape[1] + 1)):  # fmt: skip
        raise ValueError(f"logits must be [B, γ + 1, V] and lengths [B] for drafts [B, γ], got "
                         f"{tuple(logits.shape)}, {tuple(lengths.shape)} and "
                         f"{tuple(drafts.shape)}")  # fmt: skip
    sizes = [int(n) for n in lengths.tolist()]
    if any(not 0 <= n <= drafts.shape[1] for n in sizes):
        raise ValueError(f"lengths must lie in 0 … {drafts.shape[1]}, got {sizes}")
    choice = logits.argmax(dim=-1).tolist()  # [B][γ + 1]: the target's own next token
    emitted, accepted = [], 0
    for row, guesses, n in zip(choice, drafts.tolist(), sizes, strict=True):
        kept = 0  # drafts accepted before the first that fell
        while kept < n and guesses[kept] == row[kept]:
            kept += 1
        tokens = row[: kept + 1]  # the accepted drafts equal the target's tokens
        if stop is not None and stop in tokens:
            tokens = tokens[: tokens.index(stop) + 1]
        accepted += min(kept, len(tokens))
        emitted.append(tokens)
    return emitted, accepted
