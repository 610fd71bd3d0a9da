"""The parts every released-format test checkpoint is made of: sizes, a small BPE tokenizer,
tokenizer files, random weights saved as the hub lays them out, and the Qwen keys and names
several families share.

Each family module (dcode.models.families.<name>) writes its own checkpoints with these;
dcode.testing.checkpoints finds the writers. Uses the tokenizer trainer of dcode.train (dcode's
own tokenizer is dcode-tiny's). Imports torch when weights are drawn, never at import time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

STD = 0.02  # the initializer_range every family's config states


@dataclass(frozen=True)
class Size:
    """Shapes of one size. The decoder families share hidden/layers/heads; DiffusionGemma has its own."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    inner: int  # SwiGLU intermediate size
    rows: int  # embedding rows of the untied families (more than the tokenizer's ids)
    tied_rows: int  # embedding rows of qwen2, whose head is tied to the embedding
    block: int  # qwen2's attention block
    max_positions: int
    dtype: str  # torch's name: "float32", "bfloat16"
    spread: bool  # weights far from init (norms 1 +- 0.2, matrices 0.25): logits that tell layers apart
    bpe_vocab: int  # what the BPE trainer is asked for (it stops when the text runs out of merges)
    # DiffusionGemma's text model (the vision tower stays minimal)
    g_hidden: int
    g_layers: int
    g_heads: int
    g_kv_heads: int
    g_head_dim: int
    g_global_head_dim: int
    g_global_kv_heads: int
    g_inner: int
    g_experts: int
    g_top_k: int
    g_moe_inner: int
    g_sliding_window: int
    g_canvas: int


SIZES = {
    "tiny": Size(
        hidden=64, layers=2, heads=4, kv_heads=2, inner=128, rows=384, tied_rows=384, block=4,
        max_positions=1024, dtype="float32", spread=True, bpe_vocab=300,
        g_hidden=64, g_layers=2, g_heads=4, g_kv_heads=2, g_head_dim=16, g_global_head_dim=32,
        g_global_kv_heads=1, g_inner=128, g_experts=4, g_top_k=2, g_moe_inner=32,
        g_sliding_window=8, g_canvas=8,
    ),
    # ~100M parameters each: qwen2 ~101M (tied), dream ~101M, llada ~110M, diffusion_gemma ~109M.
    "100m": Size(
        hidden=768, layers=12, heads=12, kv_heads=4, inner=2048, rows=16384, tied_rows=32768, block=32,
        max_positions=4096, dtype="bfloat16", spread=False, bpe_vocab=4000,
        g_hidden=640, g_layers=12, g_heads=8, g_kv_heads=4, g_head_dim=128, g_global_head_dim=256,
        g_global_kv_heads=2, g_inner=1024, g_experts=8, g_top_k=2, g_moe_inner=256,
        g_sliding_window=512, g_canvas=256,
    ),
}  # fmt: skip

# ---------------------------------------------------------------------------------------------
# Tokenizers: a small BPE trained on generated Python, plus each family's special tokens.

QWEN_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def python_lines(count: int = 300) -> list[str]:
    """A few hundred lines of varied, plausible Python to train a small BPE on."""
    names = ["total", "items", "value", "result", "index", "count", "name", "data", "text", "node"]
    lines: list[str] = []
    for i in range(count):
        a, b = names[i % len(names)], names[(i * 7 + 3) % len(names)]
        lines += [
            f"def {a}_{i}({b}, limit={i % 17}):",
            f'    """Return the {a} of {b}."""',
            f"    for {a} in range({b} + {i}):",
            f"        if {a} % {i % 5 + 2} == 0:",
            f"            {b}.append({a} * {i})",
            f"    return {{'{a}': {b}, 'n': len({b})}}",
            "",
        ]
    return lines


def train_bpe(size: Size, specials: list[str]):  # -> tokenizers.Tokenizer
    from tokenizers import AddedToken

    from dcode.train.tokenizer import train_tokenizer

    tokenizer = train_tokenizer(python_lines(), vocab_size=size.bpe_vocab)
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    return tokenizer


def train_bpe_first(size: Size, specials: list[str]):  # -> (tokenizers.Tokenizer, token -> id)
    """A small BPE with `specials` at ids 0, 1, ... (trained after them), as a release that pins
    its special ids low has them. Returns the tokenizer and special token -> id."""
    from tokenizers import pre_tokenizers, trainers

    from dcode.train.tokenizer import build_tokenizer, special_id

    tokenizer = build_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=size.bpe_vocab, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2, show_progress=False,
    )  # fmt: skip
    tokenizer.train_from_iterator(python_lines(), trainer=trainer)
    return tokenizer, {t: special_id(tokenizer, t) for t in specials}


def dcode_tokenizer(folder: Path, size: Size) -> dict[str, int]:
    """dcode's own tokenizer files (dcode-tiny's: <|pad|> <|eos|> <|mask|> <|prompt|> <|code|> and
    its chat template). Returns role ("pad", "eos", "mask") -> id."""
    from dcode.train.tokenizer import CHAT_TEMPLATE, CODE, EOS, MASK, PAD, PROMPT

    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": PAD, "eos_token": EOS, "mask_token": MASK,
        "additional_special_tokens": [PROMPT, CODE], "chat_template": CHAT_TEMPLATE,
        "model_max_length": size.max_positions,
    }  # fmt: skip
    ids = write_tokenizer(folder, train_bpe(size, []), settings, "json")
    return {"pad": ids[PAD], "eos": ids[EOS], "mask": ids[MASK]}


def write_json(path: Path, data: Any) -> None:
    """A checkpoint's JSON file as save_pretrained writes it: indented, with a final newline."""
    path.write_text(json.dumps(data, indent=2) + "\n")


def write_tokenizer(folder: Path, tokenizer, settings: dict, files: str) -> dict[str, int]:
    """tokenizer.json ("json") or Qwen2's vocab.json + merges.txt + added_tokens.json ("vocab"), and a
    tokenizer_config.json declaring every special token. Returns special token -> id."""
    from dcode.train.tokenizer import SPECIAL_TOKENS

    added = [t.content for t in tokenizer.get_added_tokens_decoder().values()]
    ids = {t: tokenizer.token_to_id(t) for t in dict.fromkeys([*SPECIAL_TOKENS, *added])}
    if files == "json":
        tokenizer.save(str(folder / "tokenizer.json"))
    else:
        model = json.loads(tokenizer.to_str())["model"]
        (folder / "vocab.json").write_text(json.dumps(model["vocab"]))
        merges = [" ".join(m) if isinstance(m, list) else m for m in model["merges"]]
        (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
        added_ids = {t: ids[t] for t in added}  # Qwen's releases ship added_tokens.json beside them
        write_json(folder / "added_tokens.json", added_ids)
    decoder = {
        str(i): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for t, i in sorted(ids.items(), key=lambda item: item[1])
    }
    config = {"added_tokens_decoder": decoder, "clean_up_tokenization_spaces": False, **settings}
    write_json(folder / "tokenizer_config.json", config)
    return ids


# ---------------------------------------------------------------------------------------------
# Weights


def random_weights(
    shapes: dict[str, tuple[int, ...]], seed: int, device: torch.device, spread: bool = False
) -> dict[str, torch.Tensor]:
    """normal(0, STD) for matrices and biases, 1 for norm weights; spread: norms 1 + 0.2 noise,
    biases 0.3, embeddings 1, other matrices 0.25 (attention far from uniform, every norm and
    bias mattering: what a logits comparison needs)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    out = {}
    for name, shape in shapes.items():
        noise = torch.randn(shape, generator=gen, device=device)
        norm = "norm" in name or "ln_f" in name
        if not spread:
            out[name] = torch.ones(shape, device=device) if norm else noise * STD
        elif norm:
            out[name] = 1.0 + 0.2 * noise
        elif name.endswith("bias"):
            out[name] = 0.3 * noise
        elif "embed_tokens" in name or "wte" in name:
            out[name] = noise
        else:
            out[name] = 0.25 * noise
    return out


def save_qwen_weights(
    folder: Path, size: Size, device: torch.device, seed: int, *, head: bool, qwen3: bool = False, shards: int = 1
) -> int:
    """Random weights under Qwen2's names (qwen3: Qwen3's), size.rows embedding rows, an lm_head
    if `head`, saved as save_weights does. Returns the parameter count."""
    weights = random_weights(qwen2_shapes(size, size.rows, head=head, qwen3=qwen3), seed, device, size.spread)
    return save_weights(weights, folder, size.dtype, shards)


def save_weights(weights: dict[str, torch.Tensor], folder: Path, dtype: str, shards: int = 1) -> int:
    """model.safetensors, or model-0000i-of-0000n.safetensors plus the index json (as the hub's
    sharded checkpoints are laid out). Returns the parameter count."""
    import torch
    from safetensors.torch import save_file

    tensors = {k: v.to(getattr(torch, dtype)).cpu().contiguous() for k, v in weights.items()}
    if shards == 1:
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
        return sum(v.numel() for v in tensors.values())
    names, weight_map = list(tensors), {}
    for i in range(shards):
        file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::shards]}
        save_file(part, str(folder / file), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(part, file))
    total = sum(v.numel() * v.element_size() for v in tensors.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return sum(v.numel() for v in tensors.values())


def qwen2_shapes(size: Size, rows: int, *, head: bool, qwen3: bool = False) -> dict[str, tuple[int, ...]]:
    """Qwen2ForCausalLM's names (q/k/v biases), as Dream, Fast-dLLM v2 and dcode-tiny store them;
    qwen3: Qwen3ForCausalLM's, as SDAR stores them (no biases, q_norm / k_norm over a head)."""
    head_dim = size.hidden // size.heads
    hidden, kv = size.hidden, size.kv_heads * head_dim
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (rows, hidden), "model.norm.weight": (hidden,)}
    if head:
        shapes["lm_head.weight"] = (rows, hidden)
    for i in range(size.layers):
        p = f"model.layers.{i}."
        for proj, out in (("q", hidden), ("k", kv), ("v", kv)):
            shapes[f"{p}self_attn.{proj}_proj.weight"] = (out, hidden)
            if not qwen3:
                shapes[f"{p}self_attn.{proj}_proj.bias"] = (out,)
        if qwen3:
            shapes[f"{p}self_attn.q_norm.weight"] = (head_dim,)
            shapes[f"{p}self_attn.k_norm.weight"] = (head_dim,)
        shapes[f"{p}self_attn.o_proj.weight"] = (hidden, hidden)
        shapes[f"{p}mlp.gate_proj.weight"] = (size.inner, hidden)
        shapes[f"{p}mlp.up_proj.weight"] = (size.inner, hidden)
        shapes[f"{p}mlp.down_proj.weight"] = (hidden, size.inner)
        shapes[f"{p}input_layernorm.weight"] = (hidden,)
        shapes[f"{p}post_attention_layernorm.weight"] = (hidden,)
    return shapes


# ---------------------------------------------------------------------------------------------
# What several families share


def qwen_chat_tokenizer(folder: Path, size: Size, specials: list[str], tokenizer_class: str) -> dict[str, int]:
    """A Qwen chat tokenizer (tokenizer.json, <|endoftext|> / <|im_start|> / <|im_end|>, ChatML
    template) plus a family's own special tokens. Returns special token -> id."""
    tokenizer = train_bpe(size, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *specials])
    settings = {
        "tokenizer_class": tokenizer_class, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"], "chat_template": QWEN_TEMPLATE,
        "model_max_length": 131072, "errors": "replace", "split_special_tokens": False,
    }  # fmt: skip
    return write_tokenizer(folder, tokenizer, settings, "json")


def qwen_config(size: Size, ids: dict[str, int], *, tied: bool) -> dict[str, Any]:
    """The Qwen2 / Qwen3 keys SDAR's and Fast-dLLM v2's config.json share."""
    return {
        "attention_dropout": 0.0, "bos_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|im_end|>"],
        "hidden_act": "silu", "hidden_size": size.hidden, "initializer_range": STD, "intermediate_size": size.inner,
        "max_position_embeddings": size.max_positions, "max_window_layers": size.layers,
        "num_attention_heads": size.heads, "num_hidden_layers": size.layers, "num_key_value_heads": size.kv_heads,
        "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 1000000.0, "sliding_window": None,
        "tie_word_embeddings": tied, "torch_dtype": size.dtype, "use_cache": True, "use_sliding_window": False,
        "vocab_size": size.rows,
    }  # fmt: skip


def write_qwen_generation(folder: Path, ids: dict[str, int]) -> None:
    """generation_config.json ending answers on <|im_end|> or <|endoftext|>, as Qwen chat releases do."""
    generation = {"bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]]}
    write_json(folder / "generation_config.json", generation)
