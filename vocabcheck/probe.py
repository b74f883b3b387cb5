"""The behavioural probe: both tokenizers encode one built-in corpus, and every difference is counted.

Equal vocabularies can still split text differently (another normalizer, pre-tokenizer or merge order); the probe
measures how often that happens on text that looks like what people generate: prose in several scripts, code,
markup, numbers, emoji and odd whitespace.
"""

from __future__ import annotations

from dataclasses import dataclass

CORPUS: tuple[str, ...] = (
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding lets a small draft model propose tokens that a large target model verifies.",
    "It's 3:45 p.m.; we'll ship v2.10.3 on 2026-12-02 — or won't we?",
    "Der Zug fährt um 7 Uhr ab. Größe, Straße, Übermaß.",
    "Le café coûte 3,50 € ; naïve façade, cœur, Noël.",
    "¿Dónde está la biblioteca? ¡Increíble! Año, niño, corazón.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "Η γρήγορη καφέ αλεπού πηδάει πάνω από το τεμπέλικο σκυλί.",
    "中文分词测试：我们今天去北京大学图书馆看书。",
    "日本語のテキスト：こんにちは、世界！カタカナとひらがな、漢字。",
    "한국어 문장입니다. 안녕하세요, 세계!",
    "नमस्ते दुनिया, यह एक परीक्षण वाक्य है।",
    "مرحبا بالعالم، هذه جملة اختبار باللغة العربية.",
    "שלום עולם, זה משפט בדיקה.",
    "สวัสดีชาวโลก นี่คือประโยคทดสอบ",
    "Xin chào thế giới, đây là câu kiểm tra tiếng Việt.",
    "Emoji: 🤖🚀✨ 👩‍💻 👨‍👩‍👧‍👦 🇫🇷 🏳️‍🌈 ❤️ 1️⃣ 🫠",
    "Math: ∀x∈ℝ, x² ≥ 0; ∑ᵢ aᵢ = π ≈ 3.14159; α→β ⇒ γ.",
    "def fibonacci(n: int) -> int:\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
    "const x = await fetch(`/api/v1/items?id=${id}`).then(r => r.json());",
    "SELECT name, COUNT(*) AS n FROM users WHERE age >= 18 GROUP BY name ORDER BY n DESC;",
    "<div class=\"card\"><a href=\"https://example.com/?q=1&amp;r=2\">Link</a></div>",
    '{"key": [1, 2.5, -3e10, true, null], "nested": {"a": "b\\n"}}',
    "#!/usr/bin/env bash\nset -euo pipefail\necho \"$HOME\" | tr '[:lower:]' '[:upper:]'\n",
    "    indented    with    many     spaces\t\ttabs\t and trailing   ",
    "\n\n\nleading newlines\r\nwindows line\rold mac\n\n",
    "   ",
    "1234567890 12,345,678.90 0x1F 0b1010 1e-9 3.14159265358979",
    "Hello<|endoftext|>world <s> </s> [INST] [/INST] <|im_start|>user",
    "ＡＢＣ ｆｕｌｌｗｉｄｔｈ ﬁ ﬂ ① ㎏ Å Å",
    "e\u0301 vs \u00e9, zero\u200bwidth, non\u00a0breaking, soft\u00adhyphen",
    "ASCII art: ¯\\_(ツ)_/¯ (╯°□°)╯︵ ┻━┻",
    "URL https://huggingface.co/Qwen/Qwen2.5-7B-Instruct/blob/main/tokenizer.json?download=true",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "MiXeD CaSe WORDS and camelCaseIdentifiers with snake_case_names",
    "Ὀδυσσεύς, ᾅδης — polytonic Greek; Ærøskøbing; Ðæþ.",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕄𝕒𝕥𝕙 𝒮𝒸𝓇𝒾𝓅𝓉 and surrogate-range 𠜎𠜱𠝹𠱓",
)


@dataclass(frozen=True)
class ProbeResult:
    texts: int
    differing: int
    first_index: int | None
    first_text: str | None
    target_ids: tuple[int, ...] = ()
    draft_ids: tuple[int, ...] = ()
    target_tokens: tuple[str, ...] = ()
    draft_tokens: tuple[str, ...] = ()


def run_probe(target_tokenizer, draft_tokenizer, corpus: tuple[str, ...] = CORPUS) -> ProbeResult:
    """Encode ``corpus`` with both `tokenizers.Tokenizer` objects (no special tokens added) and compare."""
    targets = target_tokenizer.encode_batch(list(corpus), add_special_tokens=False)
    drafts = draft_tokenizer.encode_batch(list(corpus), add_special_tokens=False)
    differing = [i for i, (a, b) in enumerate(zip(targets, drafts)) if a.ids != b.ids]
    if not differing:
        return ProbeResult(texts=len(corpus), differing=0, first_index=None, first_text=None)
    first = differing[0]
    return ProbeResult(
        texts=len(corpus),
        differing=len(differing),
        first_index=first,
        first_text=corpus[first],
        target_ids=tuple(targets[first].ids),
        draft_ids=tuple(drafts[first].ids),
        target_tokens=tuple(targets[first].tokens),
        draft_tokens=tuple(drafts[first].tokens),
    )
