"""LLaDA2.x mini (inclusionAI/LLaDA2.0-mini, LLaDA2.1-mini): a mixture-of-experts block-diffusion
model, run in plain torch by _llada2_moe.py (transformers has no llada2_moe class, and dcode never
runs shipped code). Owns the family's facts, its catalogue entry, loading and its released-format
test checkpoint.

Sources (read to understand, nothing copied): ZHZisZZ/dllm at ca176752 (its latest stored commit)
dllm/pipelines/llada2/models (configuration_llada2_moe.py, modeling_llada2_moe.py: LLaDA2's
names), its sampler.py (threshold 0.95, blocks of 32) and dllm/utils/models.py get_tokenizer;
dllm/pipelines/llada21 (added in 62ebe4f3, "Add LLaDA2/LLaDA2.1 inference pipelines"): the same
model under LLaDA2's class names, and LLaDA21SamplerConfig / LLaDA2MoeModelLM.generate with token
editing (named_efforts below). inclusionAI/LLaDA2.X at a798329: README (LLaDA2.0-mini and
LLaDA2.1-mini "Instruction-tuned", 16B mixture of experts; Apache 2.0). LLaDA2.1-mini's Hub page
tags it llada2_moe (the format this module loads) and cites arXiv 2602.08676. Scores: the LLaDA2.1
tech report (inclusionAI/LLaDA2.X at a798329, llada2_1_tech_report.pdf, Table 2; the LLaDA2.1-mini
card shows the same table) gives EvalPlus HumanEval+ / MBPP+ only: LLaDA2.1-mini 82.93 / 74.07 in Q Mode
(80.49 / 73.28 in S Mode), LLaDA2.0-mini 81.40 / 78.24. It names the modes but not their
thresholds (the numbers dcode uses are diffusers' and SGLang's, below). The HumanEval 86.6 this
catalogue once gave LLaDA2.0-mini is in no authors' text read here (LLaDA2.0-mini-preview's card
gives 80.49, the flash-preview 88.41).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dcode.models.facts import THRESHOLD_LOW, FamilyFacts
from dcode.models.family import Entry, Family

if TYPE_CHECKING:
    import torch

    from dcode.models.families._llada2_moe import LLaDA2Denoiser
    from dcode.testing.kit import Size

LLADA21_Q_MODE = {"rule": "threshold", "threshold": 0.7, "edit_threshold": 0.5, "edit_passes": 16}
# Block-causal in blocks of 32 from position 0, logits not shifted, <|mask|> (156895) added as the
# mask and <|role_end|> as end of turn; greedy, threshold 0.95 (sampler.py).
FACTS = FamilyFacts(
    shifted=False,
    mask_token="<|mask|>",
    end_tokens=("<|role_end|>", "<|endoftext|>"),
    defaults={"ordering": "confidence", "temperature": 0.0, "rule": "threshold", "threshold": 0.95},
    default_length=32768,
    mask_id=156895,
    block=32,
    # LLaDA2.0: high and medium its generate()'s threshold 0.95; low: THRESHOLD_LOW (not measured here).
    efforts={"low": THRESHOLD_LOW},
    # LLaDA2.1 (its name says so: its files are LLaDA2.0's): token editing on, as its authors run it.
    # The rule and generate()'s defaults (threshold 0.95, editing_threshold 0.9, max_post_steps 16):
    # ZHZisZZ/dllm dllm/pipelines/llada21 (ca176752, 2026-04-14), which mirrors the model repo's
    # modeling_llada2_moe.py. Its two published modes (diffusers docs/source/en/api/pipelines/llada2.md,
    # "Recommended parameters"; arXiv 2602.08676): Q Mode, whose scores the model card reports
    # beside S Mode's, threshold 0.7 and editing 0.5, dcode's medium and high; S Mode threshold
    # 0.5 with editing (the paper: "relying on T2T to refine the output") at SGLang's JointThreshold
    # defaults (threshold 0.5, edit_threshold 0: any change its argmax makes), dcode's low.
    named_efforts=(
        (
            "llada2.1",
            {
                "medium": LLADA21_Q_MODE,
                "high": LLADA21_Q_MODE,
                "low": {"rule": "threshold", "threshold": 0.5, "edit_threshold": 0.0, "edit_passes": 16},
            },
        ),
    ),
)
CATALOGUE = (
    Entry("llada2-mini", "inclusionAI/LLaDA2.0-mini", "llada2", 16.0, 32.0, "Apache-2.0", 81.4, 78.2,
          "mixture of experts, 1.4B active", "HumanEval+ / MBPP+ (EvalPlus), LLaDA2.1 tech report Table 2"),
    Entry("llada2.1-mini", "inclusionAI/LLaDA2.1-mini", "llada2", 16.0, 32.0, "Apache-2.0", 82.9, 74.1,
          "mixture of experts, 1.4B active; its authors decode with token editing",
          "HumanEval+ / MBPP+ (EvalPlus), Q Mode (LLaDA2.1 tech report Table 2)"),
)  # fmt: skip


def load(folder: Path, device: torch.device, dtype: torch.dtype, name: str, config: dict[str, Any]) -> LLaDA2Denoiser:
    """Load a local LLaDA2.x checkpoint folder (safetensors, possibly sharded) as a denoiser."""
    from dcode.models.decoder import load_tokenizer
    from dcode.models.families._llada2_moe import LLaDA2Denoiser, load_weights

    model = load_weights(folder, config, device, dtype)
    tokenizer = load_tokenizer(folder)
    return LLaDA2Denoiser(model, tokenizer, FAMILY.state(folder, config, tokenizer, name))


# ---------------------------------------------------------------------------------------------
# The released format, for tests: random weights, a small tokenizer

LLADA2_TEMPLATE = (  # Ling 2.0's turns, as LLaDA2's chat template writes them (inferred: not in dllm)
    "{% for message in messages %}{{ '<role>' + message['role'] | upper + '</role>' + message['content'] "
    "+ '<|role_end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<role>ASSISTANT</role>' }}{% endif %}"
)


def write_checkpoint(folder: Path, size: Size, device: torch.device, seed: int) -> int:
    """LLaDA2.0-mini's format (dllm configuration_llada2_moe.py / modeling_llada2_moe.py names):
    model_type "llada2_moe", LLaDA2MoeModelLM; a dense first layer (first_k_dense_replace 1) and
    mixture-of-experts layers after it (16 experts in 8 groups, top 4 within 4 groups here; the
    release: 256, top 8), one shared expert, a fused query_key_value with q/k norms, partial rotary
    0.5, an untied head; a tokenizer.json with <|mask|> and <|role_end|>."""
    import torch

    from dcode.testing.kit import random_weights, save_weights, train_bpe, write_json, write_tokenizer

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


FAMILY = Family(
    name="llada2",
    model_types=frozenset({"llada2_moe"}),
    architectures=frozenset({"LLaDA2MoeModelLM"}),
    facts=FACTS,
    catalogue=CATALOGUE,
    load=load,
    # LLaDA2.1-mini ships LLaDA2.0-mini's format (its Hub tags: llada2_moe): this writer serves both
    checkpoints={"llada2": write_checkpoint},
)
