"""Random-weight checkpoints of every family dcode loads, each in that family's released format.

Shared by the tests (tiny size, built in a temporary folder and loaded through dcode.models.load)
and benchmarks/make_checkpoints.py (the sizes a GPU check times). Each writer puts in a folder:
config.json with the keys, values and model_type the released checkpoints carry, safetensors under
the family's own weight names, generation_config.json where the family keeps its end-of-answer
ids there, and tokenizer files with the family's special tokens (their released spellings) and
chat template: a small byte-level BPE trained on generated Python plus those tokens. The ids are
the tiny vocabulary's, not the released numbers (151669 needs a 152K-row embedding); where each
id is written (config.json, generation_config.json or the tokenizer alone) follows the release.

Sources (read to understand, nothing copied): Dream-org/Dream-v0-Instruct-7B and
Dream-Coder-v0-Instruct-7B config.json / tokenizer_config.json; GSAI-ML/LLaDA-8B-Instruct
config.json (OLMo keys) and its modeling_llada.py names; JetAstra/SDAR training/model/
(configuration_sdar.py, modeling_sdar.py: Qwen3 names with q_norm / k_norm) and generate.py
(eos [151645, 151643], <|MASK|> 151669); Fast-dLLM v2's configuration.py / modeling.py (Qwen2
names with q/k/v biases, bd_size 32, |<MASK>| 151665 in the tokenizer, stop 151645);
transformers' DiffusionGemmaForBlockDiffusion (written by save_pretrained); ZHZisZZ/dllm
dllm/pipelines/a2d (convert.py, models/qwen{2,3}/modeling_qwen{2,3}.py: A2DQwen{2,3}LMHeadModel on
the source Qwen's names) and dllm/utils/models.py get_tokenizer (<|mask|> added, <|im_end|> eot);
SalesforceAIResearch/CoDA CoDALanguageModel/ (config.json, generation_config.json,
tokenizer_config.json, modeling_coda.py); Tencent/WeDLM hf_compat/ (configuration_wedlm.py,
modeling_wedlm.py) and wedlm/engine/model_runner.py (mask 151665 when config.json names none);
dllm/pipelines/llada2/models (configuration_llada2_moe.py, modeling_llada2_moe.py: LLaDA2's names);
Stable-DiffCoder from third-party code, not the authors' release (Diffulex's
diffulex/model/config/stable_diffcoder.py and model/stable_diffcoder.py; a harness's mask id 5).

Uses the tokenizer trainer of dcode.train (the qwen2 format's tokenizer is dcode-tiny's). Imports
torch when a writer runs (it draws the weights), never at import time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

FAMILIES: tuple[str, ...] = ("qwen2", "dream", "llada", "sdar", "fast_dllm_v2", "diffusion_gemma")
FAMILIES += ("a2d_qwen2_bd3lm", "a2d_qwen2_mdlm", "a2d_qwen3_bd3lm", "a2d_qwen3_mdlm", "coda", "wedlm", "llada2")
FAMILIES += ("stable_diffcoder",)
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
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' "
    "else message['role'] %}{{ '<|turn>' + role + '\\n' + message['content'] | trim + '<turn|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|turn>model\\n' }}{% endif %}"
)
DREAM_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|beginoftext|>"]  # <|mask|> is dcode's
LLADA_SPECIALS = ["<|startoftext|>", "<|endoftext|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
LLADA_SPECIALS += ["<|mdm_mask|>"]
GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<|turn>", "<turn|>"]


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
# The families


def write_qwen2(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """dcode-tiny's format: Qwen2ForCausalLM weights (tied head), block_size / mask_token_id /
    shifted_logits in config.json, dcode's tokenizer (<|pad|> <|eos|> <|mask|> <|prompt|> <|code|>)."""
    from dcode.train.tokenizer import CHAT_TEMPLATE, CODE, EOS, MASK, PAD, PROMPT

    tokenizer = train_bpe(size, [])
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast", "pad_token": PAD, "eos_token": EOS, "mask_token": MASK,
        "additional_special_tokens": [PROMPT, CODE], "chat_template": CHAT_TEMPLATE,
        "model_max_length": size.max_positions,
    }  # fmt: skip
    ids = write_tokenizer(folder, tokenizer, settings, "json")
    count = save_weights(
        random_weights(qwen2_shapes(size, size.tied_rows, head=False), seed, device, size.spread), folder, size.dtype
    )
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": size.tied_rows,
        "hidden_size": size.hidden,
        "intermediate_size": size.inner,
        "num_hidden_layers": size.layers,
        "num_attention_heads": size.heads,
        "num_key_value_heads": size.kv_heads,
        "hidden_act": "silu",
        "max_position_embeddings": size.max_positions,
        "initializer_range": STD,
        "rms_norm_eps": 1e-06,
        "use_cache": True,
        "tie_word_embeddings": True,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": size.layers,
        "layer_types": ["full_attention"] * size.layers,
        "attention_dropout": 0.0,
        "pad_token_id": ids[PAD],
        "bos_token_id": None,
        "eos_token_id": ids[EOS],
        "dtype": size.dtype,
        "block_size": size.block,
        "mask_token_id": ids[MASK],
        "shifted_logits": True,
        "dcode_prompt": "new",
    }
    write_json(folder / "config.json", config)
    return count


def write_dream(
    folder: Path,
    size: Size,
    device: torch.device,
    seed: int,
    *,
    shards: int = 1,
    files: str = "vocab",
    specials: tuple[str, ...] = (),
) -> int:
    """Dream-Coder's format: model_type "Dream", Qwen2 names with q/k/v biases, untied head,
    vocab.json + merges.txt with a tokenizer_config naming the remote DreamTokenizer (files="json":
    a tokenizer.json and Qwen2Tokenizer instead, as Open-dCoder ships). shards: weight files;
    specials: more special tokens (DiffuCoder's <|dlm_pad|>)."""
    from dcode.train.tokenizer import MASK

    tokenizer = train_bpe(size, [*DREAM_SPECIALS, *specials])
    settings = {
        "auto_map": {"AutoTokenizer": ["tokenization_dream.DreamTokenizer", None]},
        "tokenizer_class": "DreamTokenizer",
        "bos_token": "<|beginoftext|>",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "mask_token": MASK,  # "<|mask|>", Dream's spelling too
        "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "chat_template": QWEN_TEMPLATE,
        "model_max_length": 131072,
        "errors": "replace",
    }
    if files == "json":
        settings = {k: v for k, v in settings.items() if k != "auto_map"} | {"tokenizer_class": "Qwen2Tokenizer"}
    ids = write_tokenizer(folder, tokenizer, settings, files)
    count = save_qwen_weights(folder, size, device, seed, head=True, shards=shards)
    config = {
        "architectures": ["DreamModel"],
        "auto_map": {"AutoConfig": "configuration_dream.DreamConfig", "AutoModel": "modeling_dream.DreamModel"},
        "attention_dropout": 0.0,
        "bos_token_id": ids["<|beginoftext|>"],
        "eos_token_id": ids["<|endoftext|>"],
        "hidden_act": "silu",
        "hidden_size": size.hidden,
        "initializer_range": STD,
        "intermediate_size": size.inner,
        "mask_token_id": ids[MASK],
        "max_position_embeddings": size.max_positions,
        "max_window_layers": size.layers,
        "model_type": "Dream",
        "num_attention_heads": size.heads,
        "num_hidden_layers": size.layers,
        "num_key_value_heads": size.kv_heads,
        "pad_token_id": ids["<|endoftext|>"],
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": None,
        "tie_word_embeddings": False,
        "torch_dtype": size.dtype,
        "transformers_version": "4.46.2",
        "use_cache": False,
        "use_sliding_window": False,
        "vocab_size": size.rows,
    }
    write_json(folder / "config.json", config)
    return count


# LLaDA-8B-Instruct's config.json keys that do not depend on the tiny size (OLMo's names).
LLADA_CONFIG: dict[str, object] = {
    "activation_type": "silu",
    "alibi": False,
    "alibi_bias_max": 8.0,
    "architectures": ["LLaDAModelLM"],
    "attention_dropout": 0.0,
    "attention_layer_norm": False,
    "attention_layer_norm_with_affine": True,
    "auto_map": {
        "AutoConfig": "configuration_llada.LLaDAConfig",
        "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
        "AutoModel": "modeling_llada.LLaDAModelLM",
    },
    "bias_for_layer_norm": False,
    "block_group_size": 1,
    "block_type": "llama",
    "embedding_dropout": 0.0,
    "flash_attention": False,
    "include_bias": False,
    "include_qkv_bias": False,
    "init_cutoff_factor": None,
    "init_device": "meta",
    "init_fn": "mitchell",
    "init_std": STD,
    "input_emb_norm": False,
    "layer_norm_type": "rms",
    "layer_norm_with_affine": True,
    "mlp_ratio": 4,
    "model_type": "llada",
    "multi_query_attention": None,
    "precision": "amp_bf16",
    "residual_dropout": 0.0,
    "rms_norm_eps": 1e-05,
    "rope": True,
    "rope_full_precision": True,
    "rope_theta": 500000.0,
    "scale_logits": False,
    "transformers_version": "4.46.3",
    "use_cache": False,
}


def write_llada(folder: Path, size: Size, device: torch.device, seed: int, *, tied: bool = False) -> int:
    """LLaDA-8B-Instruct's format: OLMo config keys, model.transformer.* names, no biases, untied
    head (ff_out), multi-head attention, tokenizer.json with <|mdm_mask|> and Llama 3's template.
    tied: weight_tying true and no ff_out (the head is wte)."""
    tokenizer = train_bpe(size, LLADA_SPECIALS)
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|startoftext|>",
        "eos_token": "<|endoftext|>",
        "chat_template": LLAMA3_TEMPLATE,
        "model_max_length": 1000000000000000019884624838656,
    }
    ids = write_tokenizer(folder, tokenizer, settings, "json")
    hidden = size.hidden
    shapes: dict[str, tuple[int, ...]] = {
        "model.transformer.wte.weight": (size.rows, hidden),
        "model.transformer.ln_f.weight": (hidden,),
    }
    if not tied:
        shapes["model.transformer.ff_out.weight"] = (size.rows, hidden)
    for i in range(size.layers):
        p = f"model.transformer.blocks.{i}."
        shapes |= {
            p + "q_proj.weight": (hidden, hidden),
            p + "k_proj.weight": (hidden, hidden),
            p + "v_proj.weight": (hidden, hidden),
            p + "attn_out.weight": (hidden, hidden),
            p + "ff_proj.weight": (size.inner, hidden),
            p + "up_proj.weight": (size.inner, hidden),
            p + "ff_out.weight": (hidden, size.inner),
            p + "attn_norm.weight": (hidden,),
            p + "ff_norm.weight": (hidden,),
        }
    count = save_weights(random_weights(shapes, seed, device, size.spread), folder, size.dtype)
    config = {
        **LLADA_CONFIG,
        "d_model": hidden,
        "embedding_size": size.rows,
        "eos_token_id": ids["<|endoftext|>"],
        "mask_token_id": ids["<|mdm_mask|>"],
        "max_sequence_length": size.max_positions,
        "mlp_hidden_size": size.inner,
        "n_heads": size.heads,
        "n_kv_heads": size.heads,
        "n_layers": size.layers,
        "pad_token_id": ids["<|endoftext|>"],
        "torch_dtype": size.dtype,
        "vocab_size": size.rows,
        "weight_tying": tied,
    }
    write_json(folder / "config.json", config)
    return count


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


def write_sdar(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """SDAR-4B-Chat's format: model_type "sdar", SDARForCausalLM with its auto_map, Qwen3 names
    (q_norm / k_norm, no biases, tied head as the 1.7B and 4B are), block_size 4, mask_token_id
    (<|MASK|>) in config.json, eos [<|im_end|>, <|endoftext|>] in generation_config.json."""
    ids = qwen_chat_tokenizer(folder, size, ["<|MASK|>"], "Qwen2Tokenizer")
    count = save_qwen_weights(folder, size, device, seed, head=False, qwen3=True)
    config = qwen_config(size, ids, tied=True) | {
        "architectures": ["SDARForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_sdar.SDARConfig",
            "AutoModel": "modeling_sdar.SDARModel",
            "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM",
        },
        "attention_bias": False,
        "block_size": 4,
        "head_dim": size.hidden // size.heads,
        "mask_token_id": ids["<|MASK|>"],
        "model_type": "sdar",
        "transformers_version": "4.52.4",
    }
    write_json(folder / "config.json", config)
    write_qwen_generation(folder, ids)
    return count


def write_fast_dllm_v2(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """Fast_dLLM_v2_7B's format: model_type "Fast_dLLM_Qwen" with its auto_map, Qwen2 names with
    q/k/v biases, untied head, bd_size 32; the mask |<MASK>| is in the tokenizer only (config.json
    names no mask), and answers stop on <|im_end|>."""
    ids = qwen_chat_tokenizer(folder, size, ["|<MASK>|"], "Qwen2Tokenizer")
    count = save_qwen_weights(folder, size, device, seed, head=True)
    config = qwen_config(size, ids, tied=False) | {
        "architectures": ["Fast_dLLM_QwenForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration.Fast_dLLM_QwenConfig",
            "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM",
        },
        "bd_size": 32,
        "model_type": "Fast_dLLM_Qwen",
        "transformers_version": "4.53.1",
    }
    write_json(folder / "config.json", config)
    return count


QWEN3_TEMPLATE = (  # Qwen3's: enable_thinking=false writes an empty think block (dllm renders without it)
    QWEN_TEMPLATE.replace(
        "{{ '<|im_start|>assistant\\n' }}{% endif %}",
        "{{ '<|im_start|>assistant\\n' }}{% if enable_thinking is defined and enable_thinking is false %}"
        "{{ '<think>\\n\\n</think>\\n\\n' }}{% endif %}{% endif %}",
    )
)


def write_a2d(folder: Path, size: Size, device: torch.device, seed: int, *, qwen3: bool = False) -> int:
    """Tiny-A2D's format (dllm's convert.py + save_pretrained of A2DQwen{2,3}LMHeadModel): the
    source Qwen's config keys under model_type "a2d-qwen2" / "a2d-qwen3", its weight names (Qwen2:
    q/k/v biases; Qwen3: q_norm / k_norm, head_dim), the head tied as in Qwen2.5-Coder-0.5B and
    Qwen3-0.6B; the tokenizer as Qwen ships it (vocab.json + merges.txt, Qwen2Tokenizer) with
    <|mask|> added (dllm get_tokenizer) and named mask_token; eos [<|im_end|>, <|endoftext|>] in
    generation_config.json. bd3lm or mdlm is the folder's name alone."""
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|mask|>"]
    tokenizer = train_bpe(size, specials)
    settings = {
        "tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        "mask_token": "<|mask|>", "additional_special_tokens": ["<|im_start|>", "<|im_end|>"],
        "chat_template": QWEN3_TEMPLATE if qwen3 else QWEN_TEMPLATE, "model_max_length": 32768,
        "errors": "replace", "split_special_tokens": False,
    }  # fmt: skip
    ids = write_tokenizer(folder, tokenizer, settings, "vocab")
    count = save_qwen_weights(folder, size, device, seed, head=False, qwen3=qwen3)
    kind = "Qwen3" if qwen3 else "Qwen2"
    config = qwen_config(size, ids, tied=True) | {
        "architectures": [f"A2D{kind}LMHeadModel"],
        "model_type": f"a2d-{kind.lower()}",
        "max_position_embeddings": size.max_positions,
        "transformers_version": "4.57.1",
    }
    if qwen3:
        config |= {"attention_bias": False, "head_dim": size.hidden // size.heads}
    write_json(folder / "config.json", config)
    write_qwen_generation(folder, ids)
    return count


def write_coda(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """CoDA-v0-Instruct's format (SalesforceAIResearch/CoDA, CoDALanguageModel/): model_type "CoDA"
    with its auto_map and training keys, Qwen3 names (q_norm / k_norm, no biases, head_dim), an
    own lm_head, mask_token_id in config.json and pad 151643's token; tokenizer.json plus
    vocab.json / merges.txt (Qwen2Tokenizer, mask_token <|mask|>, eos and bos <|im_end|>);
    generation_config.json with the alg "original" it ships."""
    ids = qwen_chat_tokenizer(folder, size, ["<|mask|>"], "Qwen2Tokenizer")
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings |= {"mask_token": "<|mask|>", "bos_token": "<|im_end|>", "padding_side": "right"}
    write_json(folder / "tokenizer_config.json", settings)
    count = save_qwen_weights(folder, size, device, seed, head=True, qwen3=True)
    config = {
        k: v
        for k, v in qwen_config(size, ids, tied=False).items()
        if k not in ("tie_word_embeddings", "bos_token_id", "eos_token_id")
    }
    config |= {
        "architectures": ["CoDALanguageModel"],
        "auto_map": {"AutoConfig": "model_config.CoDAConfig", "AutoModel": "modeling_coda.CoDALanguageModel"},
        "attention_bias": False, "attention_kernel": "flash_attention",
        "block_masking_probability": [0.25, 0.5, 0.5, 0.75, 0.25],
        "head_dim": size.hidden // size.heads, "mask_block_sizes": [4, 8, 16, 32], "mask_token_id": ids["<|mask|>"],
        "model_type": "CoDA", "pad_token_id": ids["<|endoftext|>"], "prefix_probability": 0,
        "sampling_eps": [0.001, 0.25, 0.5, 0.25, 0.001], "truncate_probability": 0, "transformers_version": "4.47.1",
    }  # fmt: skip
    write_json(folder / "config.json", config)
    generation = {
        "alg": "original", "alg_temp": 0.2, "diffusion_steps": 10, "eps": 0.001, "mask_token_id": ids["<|mask|>"],
        "max_tokens": 256, "output_history": False, "top_k": None, "top_p": None,
    }  # fmt: skip
    write_json(folder / "generation_config.json", generation)
    return count


def write_wedlm(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """WeDLM-8B-Instruct's format (Tencent/WeDLM hf_compat/configuration_wedlm.py): model_type
    "wedlm", WeDLMForCausalLM, Qwen3 names (qk_norm true, attention_bias false, head_dim), untied
    head, a Qwen3 chat tokenizer. The release names no mask in config.json and its code falls back
    to 151665 (Qwen3's <tool_response>), a row a tiny embedding lacks: here config.json names the
    tiny vocabulary's <tool_response> as mask_token_id, a key WeDLMConfig has."""
    ids = qwen_chat_tokenizer(folder, size, ["<tool_response>"], "Qwen2Tokenizer")
    count = save_qwen_weights(folder, size, device, seed, head=True, qwen3=True)
    config = qwen_config(size, ids, tied=False) | {
        "architectures": ["WeDLMForCausalLM"],
        "auto_map": {
            "AutoConfig": "configuration_wedlm.WeDLMConfig",
            "AutoModelForCausalLM": "modeling_wedlm.WeDLMForCausalLM",
        },
        "attention_bias": False,
        "qk_norm": True,
        "head_dim": size.hidden // size.heads,
        "model_type": "wedlm",
        "mask_token_id": ids["<tool_response>"],
        "transformers_version": "4.57.1",
    }
    write_json(folder / "config.json", config)
    return count


LLADA2_TEMPLATE = (  # Ling 2.0's turns, as LLaDA2's chat template writes them (inferred: not in dllm)
    "{% for message in messages %}{{ '<role>' + message['role'] | upper + '</role>' + message['content'] "
    "+ '<|role_end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<role>ASSISTANT</role>' }}{% endif %}"
)


def write_llada2(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """LLaDA2.0-mini's format (dllm configuration_llada2_moe.py / modeling_llada2_moe.py names):
    model_type "llada2_moe", LLaDA2MoeModelLM; a dense first layer (first_k_dense_replace 1) and
    mixture-of-experts layers after it (16 experts in 8 groups, top 4 within 4 groups here; the
    release: 256, top 8), one shared expert, a fused query_key_value with q/k norms, partial rotary
    0.5, an untied head; a tokenizer.json with <|mask|> and <|role_end|>."""
    import torch

    tokenizer = train_bpe(size, ["<|endoftext|>", "<|role_end|>", "<|mask|>"])
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "mask_token": "<|mask|>", "chat_template": LLADA2_TEMPLATE, "model_max_length": 32768,
    }  # fmt: skip
    ids = write_tokenizer(folder, tokenizer, settings, "json")
    hidden, head_dim, experts, inner = size.hidden, size.hidden // size.heads, 16, 16
    qkv = (size.heads + 2 * size.kv_heads) * head_dim
    shapes: dict[str, tuple[int, ...]] = {
        "model.word_embeddings.weight": (size.rows, hidden), "model.norm.weight": (hidden,),
        "lm_head.weight": (size.rows, hidden),
    }  # fmt: skip
    for i in range(size.layers):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": (hidden,), p + "post_attention_layernorm.weight": (hidden,),
            p + "attention.query_key_value.weight": (qkv, hidden), p + "attention.dense.weight": (hidden, hidden),
            p + "attention.query_layernorm.weight": (head_dim,), p + "attention.key_layernorm.weight": (head_dim,),
        }  # fmt: skip
        mlps = [(p + "mlp.", size.inner)] if i == 0 else [(p + f"mlp.experts.{e}.", inner) for e in range(experts)]
        if i > 0:
            mlps.append((p + "mlp.shared_experts.", inner))
            shapes |= {p + "mlp.gate.weight": (experts, hidden), p + "mlp.gate.expert_bias": (experts,)}
        for prefix, width in mlps:
            shapes |= {
                prefix + "gate_proj.weight": (width, hidden), prefix + "up_proj.weight": (width, hidden),
                prefix + "down_proj.weight": (hidden, width),
            }  # fmt: skip
    weights = random_weights(shapes, seed, device, size.spread)
    for name in [n for n in weights if n.endswith("expert_bias")]:  # learned load-balancing biases, small
        weights[name] = 0.05 * torch.randn(experts, generator=torch.Generator().manual_seed(seed)).to(device)
    count = save_weights(weights, folder, size.dtype)
    config = {
        "architectures": ["LLaDA2MoeModelLM"], "model_type": "llada2_moe",
        "auto_map": {
            "AutoConfig": "configuration_llada2_moe.LLaDA2MoeConfig",
            "AutoModelForCausalLM": "modeling_llada2_moe.LLaDA2MoeModelLM",
        },
        "vocab_size": size.rows, "hidden_size": hidden, "intermediate_size": size.inner,
        "num_hidden_layers": size.layers, "num_attention_heads": size.heads, "num_key_value_heads": size.kv_heads,
        "head_dim": head_dim, "hidden_act": "silu", "use_qkv_bias": False, "use_qk_norm": True, "use_bias": False,
        "rms_norm_eps": 1e-06, "norm_head": False, "tie_word_embeddings": False,
        "max_position_embeddings": size.max_positions, "rope_theta": 600000, "rope_scaling": None,
        "partial_rotary_factor": 0.5, "num_experts": experts,
        "num_shared_experts": 1, "num_experts_per_tok": 4, "n_group": 8, "topk_group": 4,
        "routed_scaling_factor": 2.5, "moe_intermediate_size": inner, "first_k_dense_replace": 1,
        "pad_token_id": ids["<|endoftext|>"], "eos_token_id": ids["<|endoftext|>"], "torch_dtype": size.dtype,
    }  # fmt: skip
    write_json(folder / "config.json", config)
    return count


def write_diffusion_gemma(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """transformers' own format (save_pretrained of DiffusionGemmaForBlockDiffusion: encoder,
    decoder and head tied, written once; generation_config.json), a small MoE text model, a
    one-layer vision tower, and a tokenizer with Gemma's special tokens and turn template."""
    import torch
    from transformers import DiffusionGemmaConfig, DiffusionGemmaForBlockDiffusion
    from transformers.utils import logging

    logging.disable_progress_bar()  # "Writing model shards" would clutter the log

    tokenizer = train_bpe(size, GEMMA_SPECIALS)
    settings = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<bos>",
        "eos_token": "<eos>",
        "pad_token": "<pad>",
        "unk_token": "<unk>",
        "mask_token": "<mask>",
        "additional_special_tokens": ["<|turn>", "<turn|>"],
        "chat_template": GEMMA_TEMPLATE,
        "model_max_length": 1000000000000000019884624838656,
        "padding_side": "left",
    }
    ids = write_tokenizer(folder, tokenizer, settings, "json")
    layers = size.g_layers
    layer_types = [
        "full_attention" if (i + 1) % 6 == 0 or i == layers - 1 else "sliding_attention" for i in range(layers)
    ]
    text = {
        "vocab_size": size.rows, "hidden_size": size.g_hidden, "intermediate_size": size.g_inner,
        "num_hidden_layers": layers, "num_attention_heads": size.g_heads, "num_key_value_heads": size.g_kv_heads,
        "head_dim": size.g_head_dim, "global_head_dim": size.g_global_head_dim,
        "num_global_key_value_heads": size.g_global_kv_heads, "max_position_embeddings": size.max_positions,
        "sliding_window": size.g_sliding_window, "layer_types": layer_types, "num_experts": size.g_experts,
        "top_k_experts": size.g_top_k, "moe_intermediate_size": size.g_moe_inner, "initializer_range": STD,
        "pad_token_id": ids["<pad>"], "eos_token_id": ids["<eos>"], "bos_token_id": ids["<bos>"],
    }  # fmt: skip
    vision = {
        "model_type": "gemma4_vision", "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 8, "position_embedding_size": 16,
    }  # fmt: skip
    config = DiffusionGemmaConfig(
        text_config=text, vision_config=vision, canvas_length=size.g_canvas, initializer_range=STD
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = DiffusionGemmaForBlockDiffusion(config)
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for _, param in model.named_parameters():  # tied parameters are listed once
            if param.dim() >= 2:  # matrices and expert stacks; norms and scales keep their init (1)
                param.copy_(torch.randn(param.shape, generator=gen, device=device) * STD)
    torch.nn.Module.to(model, getattr(torch, size.dtype))  # in place
    model.save_pretrained(folder)  # config.json, generation_config.json, model.safetensors
    return sum(p.numel() for p in model.parameters())


# Stable-DiffCoder's special tokens. Pinned: bos 0, pad 1, eos 2 (Diffulex's config defaults) and
# <[MASK_TOKEN]> 5 (a harness's _STABLE_DIFFCODER_MASK_ID), all third-party code. Where the other
# Seed-Coder tokens sit in the release is not known here; they fill ids 3, 4 and 6 on.
SEED_SPECIALS = ["<[begin▁of▁sentence]>", "<[PAD▁TOKEN]>", "<[end▁of▁sentence]>", "<[SEP▁TOKEN]>"]
SEED_SPECIALS += ["<[fim-prefix]>", "<[MASK_TOKEN]>", "<[fim-suffix]>", "<[fim-middle]>"]
# Seed-Coder-Instruct's turns as a third-party prompt builder writes them (LlamaEdge's
# SeedInstructPrompt): inferred, the release's own template was not read here.
SEED_TEMPLATE = (
    "{% for message in messages %}{{ '<[begin▁of▁sentence]>' + message['role'] + '\\n' + message['content'] | trim"
    " + '<[end▁of▁sentence]>' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<[begin▁of▁sentence]>assistant\\n' }}{% endif %}"
)


def seed_tokenizer(folder: Path, size: Size) -> dict[str, int]:
    """tokenizer.json with SEED_SPECIALS at ids 0..7 (the BPE trained after them) and a
    tokenizer_config.json naming bos, eos and pad as Seed-Coder's do (no mask_token: dcode finds
    <[MASK_TOKEN]> by its spelling). Returns special token -> id."""
    from tokenizers import pre_tokenizers, trainers

    from dcode.train.tokenizer import build_tokenizer, special_id

    tokenizer = build_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=size.bpe_vocab, special_tokens=SEED_SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=2, show_progress=False,
    )  # fmt: skip
    tokenizer.train_from_iterator(python_lines(), trainer=trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    ids = {t: special_id(tokenizer, t) for t in SEED_SPECIALS}
    decoder = {str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
                        "special": True} for t, i in ids.items()}  # fmt: skip
    settings = {
        "added_tokens_decoder": decoder, "bos_token": SEED_SPECIALS[0], "eos_token": SEED_SPECIALS[2],
        "pad_token": SEED_SPECIALS[1], "chat_template": SEED_TEMPLATE, "clean_up_tokenization_spaces": False,
        "model_max_length": 8192, "tokenizer_class": "PreTrainedTokenizerFast",
    }  # fmt: skip
    (folder / "tokenizer_config.json").write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n")
    return ids


def write_stable_diffcoder(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """Stable-DiffCoder-8B-Instruct's format as third-party code reads it (Diffulex's
    stable_diffcoder config and model): model_type "llama", StableDiffcoderForCausalLM with an
    auto_map to modeling_stable_diffcoder, Llama's names without any bias, an untied head, rope_theta
    500000, bos / pad / eos 0 / 1 / 2 in config.json and generation_config.json (the latter's
    content inferred), and a tokenizer with <[MASK_TOKEN]> at 5 (seed_tokenizer)."""
    ids = seed_tokenizer(folder, size)
    shapes = {k: v for k, v in qwen2_shapes(size, size.rows, head=True).items() if not k.endswith(".bias")}
    count = save_weights(random_weights(shapes, seed, device, size.spread), folder, size.dtype)
    bos, pad, eos = (ids[t] for t in SEED_SPECIALS[:3])
    config = {
        "architectures": ["StableDiffcoderForCausalLM"], "model_type": "llama",
        "auto_map": {"AutoModelForCausalLM": "modeling_stable_diffcoder.StableDiffcoderForCausalLM"},
        "attention_bias": False, "attention_dropout": 0.0, "mlp_bias": False, "hidden_act": "silu",
        "vocab_size": size.rows, "hidden_size": size.hidden, "intermediate_size": size.inner,
        "num_hidden_layers": size.layers, "num_attention_heads": size.heads, "num_key_value_heads": size.kv_heads,
        "head_dim": size.hidden // size.heads, "max_position_embeddings": size.max_positions,
        "initializer_range": STD, "rms_norm_eps": 1e-06, "rope_scaling": None, "rope_theta": 500000.0,
        "tie_word_embeddings": False, "use_cache": True, "pretraining_tp": 1,
        "bos_token_id": bos, "pad_token_id": pad, "eos_token_id": eos, "torch_dtype": size.dtype,
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {"bos_token_id": bos, "pad_token_id": pad, "eos_token_id": eos}
    (folder / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    return count


WRITERS: dict[str, Callable[..., int]] = {
    "qwen2": write_qwen2,
    "dream": write_dream,
    "llada": write_llada,
    "sdar": write_sdar,
    "fast_dllm_v2": write_fast_dllm_v2,
    "diffusion_gemma": write_diffusion_gemma,
    # Tiny-A2D: the name carries bd3lm / mdlm, as the released ids do
    "a2d_qwen2_bd3lm": write_a2d,
    "a2d_qwen2_mdlm": write_a2d,
    "a2d_qwen3_bd3lm": partial(write_a2d, qwen3=True),
    "a2d_qwen3_mdlm": partial(write_a2d, qwen3=True),
    "coda": write_coda,
    "wedlm": write_wedlm,
    "llada2": write_llada2,
    "stable_diffcoder": write_stable_diffcoder,
}


def write(family: str, folder: Path, size: str | Size = "tiny", *, seed: int = 0, **options: Any) -> int:
    """A random checkpoint of `family` in `folder` (created), on the CPU; options go to the
    family's writer (write_dream: shards, files; write_llada: tied). Returns its parameter count."""
    import torch

    folder.mkdir(parents=True, exist_ok=True)
    chosen = SIZES[size] if isinstance(size, str) else size
    return WRITERS[family](folder, chosen, torch.device("cpu"), seed, **options)
