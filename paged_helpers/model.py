"""A Qwen3-architecture decoder, written to be read, that runs on any KV cache.

The model never allocates or indexes a cache itself. Each attention layer hands its new keys
and values to the cache and gets back everything it should attend to:

    keys, values, key_positions = cache.update(layer, k, v, positions)

    k, v           [B, kv_heads, T, head_dim]   the T new tokens of each of the B sequences
    positions      [B, T] (or [T], shared)       their absolute positions
    keys, values   [B, kv_heads, S, head_dim]   history plus new tokens, S >= T
    key_positions  [S] or [B, S]                 the absolute position of each returned key

Masking is causal *by position* (a query at position p sees keys at positions <= p), so the
same code serves a full forward pass (no cache: keys are the new tokens), a contiguous static
cache, a paged cache that gathers through block tables, and a batch of sequences at different
lengths: a shorter sequence's padding rows sit at positions beyond its queries and are masked.

The kernel path (notebooks 07 and 09). ``model(tokens, positions, cache=cache,
attention=PagedAttention(decode=..., prefill=...))`` skips the gather: each layer asks the cache
for the paged alternative to ``update``,

    paged = cache.paged(layer, k, v, positions)     # writes k, v like update, gathers nothing
    paged.k_pool, paged.v_pool   [num_blocks, kv_heads, block_size, head_dim]   this layer's pools
    paged.block_tables           int [B, max_blocks]   row b: sequence b's blocks (padded rows)
    paged.block_size             int

and hands the pool itself to the learner's kernels (see ``PagedAttention`` for what they get and
may assume). ``attention=None`` (the default) is the gather path, the reference.

Architecture as in Hugging Face's Qwen3: RMSNorm before attention and MLP, per-head RMSNorm
on queries and keys (before the rotary embedding), grouped-query attention, SwiGLU MLP,
rotary embeddings in the rotate-half convention, tied input/output embeddings for the small
models. Parameter names follow Hugging Face's, so its checkpoints load without renaming.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from dataclasses import fields as dataclass_fields
from typing import Any, ClassVar, NamedTuple, Protocol

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class Qwen3Config:
    """The fields of a Qwen3 config.json that the architecture uses."""

    vocab_size: int = 256
    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 16
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    tie_word_embeddings: bool = True
    max_position_embeddings: int = 40_960

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads}) for grouped-query attention"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")

    @property
    def group_size(self) -> int:
        """Query heads per KV head: query head h reads KV head h // group_size."""
        return self.num_attention_heads // self.num_key_value_heads

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# What a learner's engine may read of a config the grader lends it (see learner_view.operations): its fields.
Qwen3Config.lent_names = tuple(field.name for field in dataclass_fields(Qwen3Config))


class KVCache(Protocol):
    """What the model needs from a cache (see the module docstring for shapes)."""

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]: ...


class PagedKV(NamedTuple):
    """What a paged cache hands the kernel path for one layer, after writing that layer's new K/V.

    k_pool, v_pool  [num_blocks, kv_heads, block_size, head_dim]  the layer's pools, not copies
    block_tables    int [B, max_blocks]  row b is the block table of the batch's sequence b, padded
                    with a real block id; the cache's ``table_tensor``
    block_size      int  tokens per block
    """

    k_pool: torch.Tensor
    v_pool: torch.Tensor
    block_tables: torch.Tensor
    block_size: int


@dataclass(frozen=True)
class PagedAttention:
    """Attention read straight from the paged pool by two kernels: the switch from the gather path.

    ``model(tokens, positions, cache=cache, attention=PagedAttention(decode=fn, prefill=fn))``.
    The functions are the learner's launchers of notebooks 07 and 09, called exactly as there:

    decode(q, k_pool, v_pool, block_tables, lengths, block_size) -> [B, q_heads, head_dim]
        for a step of one new token per sequence (T == 1), once per layer.
        q             [B, q_heads, head_dim], contiguous, the model's dtype
        k_pool/v_pool the layer's pools, same dtype and device as q (never copied)
        block_tables  the cache's int [B, max_blocks] table (int64 from set_batch)
        lengths       int32 [B]: tokens of each sequence in the pool, the new one included
                      (its position + 1), so every length >= 1

    prefill(q, k_pool, v_pool, block_table, start, block_size) -> [T, q_heads, head_dim]
        for a chunk of T > 1 new tokens per sequence, once per layer and sequence.
        q             [T, q_heads, head_dim], contiguous: that sequence's new tokens
        block_table   int [max_blocks], the sequence's row of the table (padding included)
        start         int >= 0: the position of the chunk's first token (tokens cached before it)

    What the kernels may assume: the new tokens' keys and values are already in the pool; the
    table row reaches every position the kernel must read (lengths, or start + T); query head h
    reads KV head h // (q_heads // kv_heads) (grouped-query attention; a group of 1 is plain
    multi-head); scores are scaled by 1 / sqrt(head_dim). Outputs come back in q's dtype. Before
    any layer runs, the model refuses rows whose new positions are not consecutive (start ..
    start + T - 1); it takes row b's cache to hold exactly positions 0 .. start - 1 before the
    step, as an engine's step does (a chunk never skips or rewrites a position).
    """

    decode: Callable[..., torch.Tensor]
    prefill: Callable[..., torch.Tensor]

    def __post_init__(self) -> None:
        for name in ("decode", "prefill"):
            if not callable(getattr(self, name)):
                raise TypeError(
                    f"PagedAttention({name}=...) must be a function like notebook "
                    f"{'07' if name == 'decode' else '09'}'s paged_{name}_attention, got "
                    f"{type(getattr(self, name)).__name__}"
                )

    def __call__(self, layer: int, q: torch.Tensor, paged: PagedKV, positions: torch.Tensor) -> torch.Tensor:
        """q [B, q_heads, T, head_dim] (rotated) and positions [B, T] -> attention output [B, q_heads, T, D]."""
        batch, heads, steps, head_dim = q.shape
        if steps == 1:
            lengths = (positions[:, 0] + 1).to(torch.int32)  # [B]: the new token is in the pool already
            out = self.decode(
                q[:, :, 0, :].contiguous(),  # [B, Hq, D]
                paged.k_pool,
                paged.v_pool,
                paged.block_tables,
                lengths,
                paged.block_size,
            )
            _check_kernel_reply("decode", layer, out, (batch, heads, head_dim), q)
            return out[:, :, None, :]  # [B, Hq, 1, D]
        rows = []
        for row in range(batch):
            out = self.prefill(
                q[row].transpose(0, 1).contiguous(),  # [T, Hq, D]
                paged.k_pool,
                paged.v_pool,
                paged.block_tables[row].contiguous(),  # [max_blocks]
                int(positions[row, 0]),
                paged.block_size,
            )
            _check_kernel_reply("prefill", layer, out, (steps, heads, head_dim), q)
            rows.append(out.transpose(0, 1))  # [Hq, T, D]
        return torch.stack(rows)  # [B, Hq, T, D]


def _check_kernel_reply(kind: str, layer: int, out: object, shape: tuple[int, ...], q: torch.Tensor) -> None:
    """A kernel that returns the wrong thing gets a message naming the kernel, the layer and the shape."""
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape or out.dtype != q.dtype:
        got = f"{tuple(out.shape)} {out.dtype}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(
            f"PagedAttention's {kind} function returned {got} in layer {layer}; the model needs a tensor "
            f"{list(shape)} in q's dtype {q.dtype}"
        )


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in float32 whatever the activations' dtype, as Qwen3 does.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rotary_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin for absolute positions [B, T] -> two tensors [B, 1, T, head_dim]."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, device=positions.device, dtype=torch.float32) / head_dim)
    angles = positions.float()[..., None] * inv_freq  # [B, T, head_dim / 2]
    angles = torch.cat([angles, angles], dim=-1)  # [B, T, head_dim]
    return angles.cos().to(dtype)[:, None], angles.sin().to(dtype)[:, None]


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (i, i + head_dim/2) of x [B, H, T, head_dim] by their position's angle."""
    first, second = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-second, first], dim=-1) * sin


class Qwen3Attention(nn.Module):
    def __init__(self, config: Qwen3Config, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.heads, self.kv_heads, self.head_dim = (
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
        )
        self.q_proj = nn.Linear(config.hidden_size, self.heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(config.hidden_size, self.kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.heads * self.head_dim, config.hidden_size, bias=False)
        self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: KVCache | None,
        attention: PagedAttention | None = None,
    ) -> torch.Tensor:
        batch, steps, _ = x.shape
        q = self.q_norm(self.q_proj(x).view(batch, steps, self.heads, self.head_dim)).transpose(1, 2)
        k = self.k_norm(self.k_proj(x).view(batch, steps, self.kv_heads, self.head_dim)).transpose(1, 2)
        v = self.v_proj(x).view(batch, steps, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)  # [B, H, T, D], [B, Hkv, T, D]

        if attention is not None:
            _check_cache_dtype(self.layer, cache, k)
            paged = _read_paged_reply(self.layer, cache, cache.paged(self.layer, k, v, positions), k)
            out = attention(self.layer, q, paged, positions)  # [B, H, T, D]
            return self.o_proj(out.transpose(1, 2).reshape(batch, steps, self.heads * self.head_dim))
        if cache is None:
            keys, values, key_positions = k, v, positions
        else:
            _check_cache_dtype(self.layer, cache, k)
            keys, values, key_positions = cache.update(self.layer, k, v, positions)
            _check_cache_reply(self.layer, cache, keys, values, key_positions, k)

        group = self.heads // self.kv_heads
        keys = keys.repeat_interleave(group, dim=1)  # [B, H, S, D]
        values = values.repeat_interleave(group, dim=1)
        if key_positions.ndim == 1:
            key_positions = key_positions.expand(batch, -1)  # [B, S]
        visible = key_positions[:, None, None, :] <= positions[:, None, :, None]  # [B, 1, T, S]
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=visible)  # [B, H, T, D]
        return self.o_proj(out.transpose(1, 2).reshape(batch, steps, self.heads * self.head_dim))


def _check_cache_dtype(layer: int, cache: object, new_k: torch.Tensor) -> None:
    """A cache whose pools hold another dtype than the model computes in would fail inside its own
    update with torch's "Index put requires the source and destination dtypes match"; say instead
    what to change. (load_qwen3 gives bfloat16 on a GPU, while caches default to float32.)"""
    pools = getattr(cache, "k_pool", None)
    pool = pools[layer] if isinstance(pools, (list, tuple)) and len(pools) > layer else pools
    if isinstance(pool, torch.Tensor) and pool.dtype != new_k.dtype:
        name = type(cache).__name__
        held = str(pool.dtype).removeprefix("torch.")
        computed = str(new_k.dtype).removeprefix("torch.")
        raise TypeError(
            f"{name} holds {held} keys and values, but the model computes in {computed}: build the cache "
            f"in the model's dtype, {name}(..., dtype=model.dtype, device=model.device), or convert the "
            f"model with model.to(torch.{held})."
        )


def _check_cache_reply(
    layer: int,
    cache: object,
    keys: torch.Tensor,
    values: torch.Tensor,
    key_positions: torch.Tensor,
    new_k: torch.Tensor,
) -> None:
    """A cache that breaks the protocol gets a message naming what it returned."""
    name = type(cache).__name__
    batch, kv_heads, _, head_dim = new_k.shape
    for label, tensor in (("keys", keys), ("values", values)):
        if (
            not isinstance(tensor, torch.Tensor)
            or tensor.ndim != 4
            or tensor.shape[0] != batch
            or tensor.shape[1] != kv_heads
            or tensor.shape[3] != head_dim
        ):
            shape = tuple(tensor.shape) if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise ValueError(
                f"{name}.update(layer={layer}) returned {label} of shape {shape}; the protocol needs "
                f"[batch={batch}, kv_heads={kv_heads}, S, head_dim={head_dim}]"
            )
    if keys.shape != values.shape:
        raise ValueError(
            f"{name}.update(layer={layer}) returned keys {tuple(keys.shape)} but values {tuple(values.shape)}"
        )
    span = keys.shape[2]
    if not isinstance(key_positions, torch.Tensor) or key_positions.shape not in (
        torch.Size([span]),
        torch.Size([batch, span]),
    ):
        shape = tuple(key_positions.shape) if isinstance(key_positions, torch.Tensor) else key_positions
        raise ValueError(
            f"{name}.update(layer={layer}) returned key_positions {shape}; expected [{span}] or "
            f"[{batch}, {span}] (one absolute position per returned key)"
        )


def _read_paged_reply(layer: int, cache: object, reply: object, new_k: torch.Tensor) -> PagedKV:
    """``cache.paged``'s reply as this module's PagedKV; a reply that breaks the protocol gets a
    message naming what it returned.

    Read by field, not by class: the learner's notebook may have built its PagedKV from another
    import of this module (the grader imports the package afresh in every test cell).
    """
    name = type(cache).__name__
    fields = PagedKV._fields
    if not all(hasattr(reply, field) for field in fields):
        raise TypeError(
            f"{name}.paged(layer={layer}) returned {type(reply).__name__}; the kernel path needs "
            "paged_helpers.model.PagedKV(k_pool, v_pool, block_tables, block_size)"
        )
    paged = PagedKV(*(getattr(reply, field) for field in fields))
    if isinstance(paged.block_size, bool) or not isinstance(paged.block_size, int) or paged.block_size < 1:
        raise ValueError(f"{name}.paged(layer={layer}) returned block_size {paged.block_size!r}; expected an int >= 1")
    batch, kv_heads, _, head_dim = new_k.shape
    for label in ("k_pool", "v_pool"):
        pool = getattr(paged, label)
        if (
            not isinstance(pool, torch.Tensor)
            or pool.ndim != 4
            or (pool.shape[1], pool.shape[2], pool.shape[3]) != (kv_heads, paged.block_size, head_dim)
        ):
            shape = tuple(pool.shape) if isinstance(pool, torch.Tensor) else type(pool).__name__
            raise ValueError(
                f"{name}.paged(layer={layer}) returned {label} of shape {shape}; the protocol needs "
                f"[num_blocks, kv_heads={kv_heads}, block_size={paged.block_size}, head_dim={head_dim}]"
            )
    tables = paged.block_tables
    if not isinstance(tables, torch.Tensor) or tables.ndim != 2 or tables.shape[0] != batch:
        shape = tuple(tables.shape) if isinstance(tables, torch.Tensor) else type(tables).__name__
        raise ValueError(
            f"{name}.paged(layer={layer}) returned block_tables of shape {shape}; the protocol needs "
            f"[batch={batch}, max_blocks] (the table_tensor set_batch built)"
        )
    return paged


class Qwen3MLP(nn.Module):
    def __init__(self, config: Qwen3Config) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Qwen3Block(nn.Module):
    def __init__(self, config: Qwen3Config, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Qwen3Attention(config, layer)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = Qwen3MLP(config)

    def forward(self, x, positions, cos, sin, cache, attention=None):
        x = x + self.self_attn(self.input_layernorm(x), positions, cos, sin, cache, attention)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3(nn.Module):
    """tokens [B, T] and positions [B, T] (or [T]) -> logits [B, T, vocab].

    With ``cache=None`` the model attends over the tokens it is given: the "from scratch"
    logits every cache is compared against. With ``attention=PagedAttention(...)`` and a paged
    cache, attention reads the pool through the given kernels instead of a gather (module docstring).
    """

    # What a learner's engine may read of the model the grader lends it: a call runs the forward
    # pass; nothing else of the model (its weights, its methods) is the learner's to reach.
    lent_names: ClassVar[tuple[str, ...]] = ("config", "device", "dtype")

    def __init__(self, config: Qwen3Config) -> None:
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(Qwen3Block(config, i) for i in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = (
            None if config.tie_word_embeddings else nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        )

    @property
    def device(self) -> torch.device:
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.embed_tokens.weight.dtype

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        attention: PagedAttention | None = None,
    ) -> torch.Tensor:
        tokens = torch.as_tensor(tokens, device=self.device)
        if tokens.ndim == 1:
            tokens = tokens[None]
        if tokens.ndim != 2 or tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(
                f"tokens must be integer ids of shape [batch, steps]; got {tuple(tokens.shape)} {tokens.dtype}"
            )
        batch, steps = tokens.shape
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.config.vocab_size):
            raise ValueError(
                f"tokens must lie in [0, vocab_size={self.config.vocab_size}); got ids from "
                f"{int(tokens.min())} to {int(tokens.max())}"
            )
        if positions is None:
            if cache is not None:
                raise ValueError("positions are required with a cache: pass each new token's absolute position")
            positions = torch.arange(steps, device=self.device)
        positions = torch.as_tensor(positions, device=self.device)
        if positions.shape == (steps,):
            positions = positions.expand(batch, steps)
        if positions.shape != (batch, steps):
            raise ValueError(
                f"positions must have shape [{steps}] or [{batch}, {steps}] to match tokens {tuple(tokens.shape)}; "
                f"got {tuple(positions.shape)}"
            )
        if positions.dtype not in (torch.int64, torch.int32) or (positions.numel() and int(positions.min()) < 0):
            raise ValueError(f"positions must be non-negative integers; got {positions.dtype}")

        if attention is not None:
            _check_kernel_path(cache, attention, positions)

        x = self.embed_tokens(tokens)
        cos, sin = rotary_cos_sin(positions, self.config.head_dim, self.config.rope_theta, x.dtype)
        for block in self.layers:
            x = block(x, positions, cos, sin, cache, attention)
        x = self.norm(x)
        head = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return x @ head.T

    @torch.no_grad()
    def logits_from_scratch(self, sequences: list[list[int]]) -> list[torch.Tensor]:
        """Each whole sequence run alone with no cache: logits [len, vocab] per sequence."""
        return [self(torch.tensor([seq], device=self.device))[0] for seq in sequences]


def _check_kernel_path(cache: object, attention: object, positions: torch.Tensor) -> None:
    """What the kernel path needs before any layer runs, each refusal naming the argument."""
    if not isinstance(attention, PagedAttention):
        raise TypeError(
            "attention must be PagedAttention(decode=..., prefill=...) or None (the gather path), "
            f"got {type(attention).__name__}"
        )
    if cache is None:
        raise ValueError("attention=PagedAttention(...) reads a paged cache: pass cache= as well")
    if not callable(getattr(cache, "paged", None)):
        raise TypeError(
            f"{type(cache).__name__} has no paged(layer, k, v, positions) method, which the kernel path "
            "calls instead of update: use a PagedKVCache (notebook 03 on), or attention=None to gather"
        )
    # The kernels see each row as positions 0 .. start + T - 1: new tokens must follow one another.
    if positions.shape[1] > 1 and bool((positions[:, 1:] - positions[:, :-1] != 1).any()):
        raise ValueError(
            "with attention=PagedAttention(...), each row's positions must be consecutive "
            f"(start, start + 1, ...); got {positions.tolist()}"
        )


def tiny_config(**overrides: Any) -> Qwen3Config:
    """The course's default model: small enough for milliseconds per forward pass on a CPU."""
    return Qwen3Config(**overrides)


def random_qwen3(seed: int = 0, config: Qwen3Config | None = None) -> Qwen3:
    """A float32 CPU Qwen3 with deterministic random weights: same seed, same model, on any machine.

    Weights are scaled so the logits are far from uniform (greedy decoding picks varied
    tokens), which makes corrupted caches visible in the outputs. The course's checkpoint in
    data/tiny-qwen3 is this model at seed 0 with the default config, saved to files.
    """
    config = config or tiny_config()
    generator = torch.Generator().manual_seed(seed)
    model = Qwen3(config)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("norm.weight"):
                parameter.copy_(1.0 + 0.1 * torch.randn(parameter.shape, generator=generator))
            elif parameter.ndim == 2:
                fan_in = parameter.shape[1]
                parameter.copy_(torch.randn(parameter.shape, generator=generator) / math.sqrt(fan_in))
    return model.eval()
