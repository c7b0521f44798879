"""The pre-tokenizer a GGUF file's `tokenizer.ggml.pre` names, as llama.cpp applies it, for a `tokenizers` tokenizer.

A byte-level BPE vocabulary (`tokenizer.ggml.model = gpt2`) is split into words before its merges run, and how is
named only by `tokenizer.ggml.pre`. llama.cpp maps each name to a list of regexes applied one after another
(`llm_tokenizer_bpe` in its src/llama-vocab.cpp), each keeping matched and unmatched text as separate pieces; that is
a `tokenizers` `Sequence` of `Split(regex, "isolated")`, then `ByteLevel` without its own regex, as Hugging Face's
tokenizer.json files for these models spell it. The regexes are llama.cpp's, or the tokenizer.json originals its
comments quote where it rewrote one for std::regex; its hand-written GPT-2 split also takes trailing whitespace,
hence GPT-2's final `|\\s+`. The names are those the llama.cpp vendored in llama-cpp-python 0.3.36 (commit 0c1e570)
accepts, except where its split has no regex form or skips the byte encoding (kimi-k2, afmoe, superbpe, chameleon,
bailingmoe, granite-embed-multi, gemma4, sarvam-moe, whitespace): such a file is refused by name. Each distinct
entry is checked against llama.cpp's own ids (tests/fixtures/tokenizer/llamacpp_token_ids.json).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from userturn.core.errors import UserError

_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
_UPPER, _LOWER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]", r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
TEKKEN = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*|\p{{N}}"
          r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
GPT4O = (rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
         rf"{_CONTRACTIONS}?|\p{{N}}{{1,3}}| ?[^\s\p{{L}}\p{{N}}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"  # non-ASCII spelled as escapes: editors normalise them
_DEEPSEEK_LETTERS = (
    "A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373"
    "\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481"
    "\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf\u1d00-\u1d2b"
    "\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d\u1f50-\u1f57\u1f59\u1f5b"
    "\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb"
    "\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113\u2115\u2119-\u211d\u2124\u2126\u2128"
    "\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4"
    "\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf"
    "\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3"
    "\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943"
)
DEEPSEEK_LLM = (
    r"[\r\n]",
    rf"\s?[{_DEEPSEEK_LETTERS}]+",
    "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+",
    r"\s+$",
    _CJK,
    r"\p{N}+",
)
DEEPSEEK_CODER = (r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}")
DEEPSEEK3 = (r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
             r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
             r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
FALCON = (r"[\p{P}\$\+<=>\^~\|`]+", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
          "[0-9][0-9][0-9]")
BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"
DEFAULT = (r"[\p{P}\$\+<=>\^~\|]+", r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
           r"\p{N}+", "[0-9][0-9][0-9]")

_QWEN2_TAIL = r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
UFAKZEKA = r"[^\r\n\p{L}\p{N}]?\p{L}+" + _QWEN2_TAIL  # qwen2 without the contractions
JAIS2 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
         + "".join(rf"|\s{{{n}}}(?!\S)" for n in (512, 256, 128, 64, 32, 16, 8, 4)) + r"|\s{1,2}(?!\S)|\s{1}")
SEED_CODER = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)"
              r"|\s+")
EXAONE_MOE = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?"
              r"|\s*[\r\n]|\s+(?!\S)|\s+")
MINICPM5 = (r"\p{N}{1,3}", _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
            r"|\s+(?!\S)|\s+")
_KANA = "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"
_WORDS_PUNCT = r"[!\"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
SPARK2_5 = (r"\p{N}{1,3}", _KANA, _WORDS_PUNCT + r"| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+", r"\p{N}")
YOUTU = ("[\uac00-\ud7a3\u3131-\u318e]+|[\uff01\u2026\u201c\u201d\u2018\u2019\u2014\uff1a\uff1b\uff0c\u3001-\u303f"
         "\ufe30-\ufe4f]+|[\u3105-\u312f]+|" + _KANA,
         rf"[^\r\n\p{{L}}\p{{N}}]?{_UPPER}*{_LOWER}+{_CONTRACTIONS}?|[^\r\n\p{{L}}\p{{N}}]?{_UPPER}+{_LOWER}*"
         rf"{_CONTRACTIONS}?|\p{{N}}| ?[^\s\p{{L}}\p{{N}}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+")


class PreTokenizer(NamedTuple):
    """What llama.cpp does before the merges: the regexes, in order, and whether a word in the vocabulary is taken
    whole (`ignore_merges`)."""

    splits: tuple[str, ...]
    ignore_merges: bool = False


def _names(names: str, pre: PreTokenizer) -> dict[str, PreTokenizer]:
    return dict.fromkeys(names.split(), pre)


# llama.cpp's `tokenizer_pre` names, grouped by the regexes its `llm_tokenizer_bpe` gives their pre-tokenizer type
PRE_TOKENIZERS: dict[str, PreTokenizer] = {
    **_names("default", PreTokenizer(DEFAULT)),
    **_names("gpt-2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert jina-v1-en "
             "jina-v2-code roberta-bpe mpt olmo jais trillion granite-docling exaone4", PreTokenizer((GPT2,))),
    **_names("starcoder refact command-r smollm codeshell exaone minerva-7b mellum2",
             PreTokenizer((r"\p{N}", GPT2))),
    **_names("llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2 jina-v5-nano glm4 glm5",
             PreTokenizer((LLAMA3,), ignore_merges=True)),
    **_names("dbrx smaug-bpe chatglm-bpe", PreTokenizer((LLAMA3,))),
    **_names("qwen2 deepseek-r1-qwen kormo f2llmv2 megrez stablelm2 hunyuan solar-open grok-2",
             PreTokenizer((QWEN2,))),
    **_names("qwen35", PreTokenizer((QWEN35,))),
    **_names("tekken", PreTokenizer((TEKKEN,), ignore_merges=True)),
    **_names("gpt-4o llama4 kanana2 talkie minimax-m2", PreTokenizer((GPT4O,))),
    **_names("deepseek-llm", PreTokenizer(DEEPSEEK_LLM)),
    **_names("deepseek-coder", PreTokenizer(DEEPSEEK_CODER)),
    **_names("deepseek-v3 hunyuan-dense joyai-llm hy_v4", PreTokenizer(DEEPSEEK3)),
    **_names("falcon", PreTokenizer(FALCON)),
    **_names("poro-chat bloom gpt3-finnish", PreTokenizer((BLOOM,))),
    **_names("viking", PreTokenizer((BLOOM, r"\p{N}"))),
    **_names("ufakzeka", PreTokenizer((UFAKZEKA,))),
    **_names("jais-2", PreTokenizer((JAIS2,))),
    **_names("seed-coder", PreTokenizer((SEED_CODER,))),
    **_names("exaone-moe", PreTokenizer((EXAONE_MOE,))),
    **_names("minicpm5", PreTokenizer(MINICPM5, ignore_merges=True)),
    **_names("laguna", PreTokenizer(("[^\\n]+|[\\n]+", QWEN2))),
    **_names("spark2_5", PreTokenizer(SPARK2_5)),
    **_names("youtu", PreTokenizer(YOUTU, ignore_merges=True)),
    **_names("tiny_aya cohere2moe", PreTokenizer((r"\d{1,3}(?=(?:\d{3})*\b)", GPT4O))),
}


def pre_tokenizer_for(pre: str | None, source: str) -> PreTokenizer:
    """The pre-tokenizer llama.cpp applies for `tokenizer.ggml.pre = pre` (its default when the key is absent);
    a UserError naming the value and `source` for a name not mapped here (llama.cpp too refuses a name it does not
    know, rather than guess)."""
    if pre is None:
        return PRE_TOKENIZERS["default"]
    if pre not in PRE_TOKENIZERS:
        raise UserError(f"{source}: unknown GGUF pre-tokenizer tokenizer.ggml.pre = {pre!r} (not one of the "
                         f"{len(PRE_TOKENIZERS)} llama.cpp names userturn maps, e.g. smollm, llama-bpe, qwen2); pass "
                         "the model's own tokenizer directory or hub id with --tokenizer")
    return PRE_TOKENIZERS[pre]


def apply_pre_tokenizer(backend: Any, pre: PreTokenizer) -> None:
    """Give the `tokenizers.Tokenizer` `backend` llama.cpp's word splitting for `pre` (byte-level BPE only)."""
    from tokenizers import Regex, pre_tokenizers

    backend.pre_tokenizer = pre_tokenizers.Sequence([
        *(pre_tokenizers.Split(Regex(split), behavior="isolated") for split in pre.splits),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    backend.model.ignore_merges = pre.ignore_merges
