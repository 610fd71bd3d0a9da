"""Tokenizer files read without transformers: PlainTokenizer (a tokenizer.json run by the
`tokenizers` library alone, with the few calls dcode makes of a transformers tokenizer:
dcode-tiny's start-up does not import transformers, native.py says why) and TokenTable (the
vocabulary and special tokens, read with json alone, for the torch-free listing).

Owns: encode/decode, offsets, one token's text, the special tokens tokenizer_config.json names,
rendering a chat template the way transformers does (a sandboxed Jinja environment with
trim_blocks and lstrip_blocks), and refusing a folder without tokenizer files. PlainTokenizer is
used only for folders whose tokenizer_config asks for PreTrainedTokenizerFast (or no class) and
whose chat template needs no transformers extension; tests hold it equal to transformers'
tokenizer. Knows nothing about models or sampling.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dcode.models.base import ModelError
from dcode.models.checkpoint import read_optional_json

SPECIAL = ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token")
# What tokenizer_config.json may name as tokenizer_class for a plain tokenizer.json.
PLAIN_CLASSES = (None, "PreTrainedTokenizerFast", "TokenizersBackend")
# Files that hold a tokenizer's vocabulary; a folder with none of them has no tokenizer.
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "tokenizer.model", "tiktoken.model")
ROLES = ("mask_token", "eos_token", "pad_token", "unk_token")


def settings_of(folder: Path) -> dict[str, Any]:
    """tokenizer_config.json as a dict ({} when absent or not an object)."""
    return read_optional_json(folder / "tokenizer_config.json")


def fits(folder: Path) -> bool:
    """Whether a folder's tokenizer is a plain tokenizer.json this class reads as transformers would."""
    settings = settings_of(folder)
    template = settings.get("chat_template")
    return (
        (folder / "tokenizer.json").is_file()
        and settings.get("tokenizer_class") in PLAIN_CLASSES
        and "auto_map" not in settings
        and (template is None or (isinstance(template, str) and "{% generation" not in template))
    )


def token_text(value: object) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def require_tokenizer(folder: Path) -> None:
    """A one-line ModelError when the folder holds no tokenizer files: an empty tokenizer would
    load, and every prompt would encode to nothing."""
    if not any((folder / name).is_file() for name in TOKENIZER_FILES) and not any(folder.glob("*.tiktoken")):
        raise ModelError(f"{folder}: no tokenizer files (tokenizer.json, or vocab.json and merges.txt)")


class TokenTable:
    """The vocabulary and special tokens of a folder's tokenizer files, read with json alone:
    what transformers' tokenizer would say about them (get_vocab, mask/eos/pad/unk_token_id),
    without encoding anything."""

    def __init__(self, folder: Path) -> None:
        require_tokenizer(folder)
        vocab: dict[str, int] = {}
        whole = read_optional_json(folder / "tokenizer.json")
        model = whole.get("model")
        if isinstance(model, dict) and isinstance(model.get("vocab"), dict):
            vocab.update(model["vocab"])
        elif (folder / "vocab.json").is_file():
            vocab.update(read_optional_json(folder / "vocab.json"))
        added = [(t.get("id"), t.get("content")) for t in whole.get("added_tokens") or [] if isinstance(t, dict)]
        added += [(i, t) for t, i in read_optional_json(folder / "added_tokens.json").items()]  # Qwen's releases
        settings = read_optional_json(folder / "tokenizer_config.json")
        decoder = settings.get("added_tokens_decoder") or {}
        added += [(int(i), token_text(t)) for i, t in decoder.items() if str(i).isdigit()]
        vocab.update({text: i for i, text in added if isinstance(text, str) and isinstance(i, int)})
        self.vocab = vocab
        named = {**read_optional_json(folder / "special_tokens_map.json"), **settings}
        self.roles = {role: token_text(named.get(role)) for role in ROLES}

    def get_vocab(self) -> dict[str, int]:
        return self.vocab

    def role_id(self, role: str) -> int | None:
        text = self.roles.get(role)
        return self.vocab.get(text) if text is not None else None

    @property
    def mask_token_id(self) -> int | None:
        return self.role_id("mask_token")

    @property
    def eos_token_id(self) -> int | None:
        return self.role_id("eos_token")

    @property
    def pad_token_id(self) -> int | None:
        return self.role_id("pad_token")

    @property
    def unk_token_id(self) -> int | None:
        return self.role_id("unk_token")


class PlainTokenizer:
    def __init__(self, folder: Path) -> None:
        from tokenizers import Tokenizer  # Rust: imported where a tokenizer is run, not listed

        try:
            self.backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
        except Exception as error:  # the Rust library raises its own exception type
            raise ModelError(f"{folder}: cannot load the tokenizer: {str(error).splitlines()[0]}") from None
        settings = settings_of(folder)
        self.special = {name: text for name in SPECIAL if (text := token_text(settings.get(name))) is not None}
        template = settings.get("chat_template")
        self.chat_template: str | None = template if isinstance(template, str) else None

    def _id(self, name: str) -> int | None:
        text = self.special.get(name)
        return self.backend.token_to_id(text) if text is not None else None

    @property
    def mask_token_id(self) -> int | None:
        return self._id("mask_token")

    @property
    def eos_token_id(self) -> int | None:
        return self._id("eos_token")

    @property
    def pad_token_id(self) -> int | None:
        return self._id("pad_token")

    def get_vocab(self) -> dict[str, int]:
        return self.backend.get_vocab(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=add_special_tokens).ids)

    def __call__(
        self, text: str, add_special_tokens: bool = True, return_offsets_mapping: bool = False
    ) -> dict[str, list[Any]]:
        encoded = self.backend.encode(text, add_special_tokens=add_special_tokens)
        out: dict[str, list[Any]] = {"input_ids": list(encoded.ids)}
        if return_offsets_mapping:
            out["offset_mapping"] = list(encoded.offsets)
        return out

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def convert_ids_to_tokens(self, ids: list[int]) -> list[str | None]:
        return [self.backend.id_to_token(i) for i in ids]

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        decoder = self.backend.decoder
        return decoder.decode(tokens) if decoder is not None else "".join(tokens)

    def apply_chat_template(
        self, messages: list[dict[str, str]], tokenize: bool = False, add_generation_prompt: bool = False
    ) -> str:
        """The messages in the chat template, as transformers renders it (tokenize=False only)."""
        if self.chat_template is None:
            raise ModelError("this tokenizer has no chat template")
        if tokenize:
            raise ValueError("PlainTokenizer renders text only: call encode() on the result")
        from jinja2.ext import loopcontrols
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message: str) -> None:
            raise ModelError(f"chat template: {message}")

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = lambda value, indent=None: json.dumps(value, indent=indent, ensure_ascii=False)
        env.globals["raise_exception"] = raise_exception
        return env.from_string(self.chat_template).render(
            messages=messages, add_generation_prompt=add_generation_prompt, **self.special
        )
