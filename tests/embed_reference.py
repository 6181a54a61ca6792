"""A numpy all-MiniLM-L6-v2, the reference that `bench_embed --queries` is measured against.

    bash tests/embed-reference.sh     # installs numpy, tokenizers and safetensors, runs both
    OPENBLAS_NUM_THREADS=1 python tests/embed_reference.py QUESTIONS.json [MODEL_DIR]

QUESTIONS.json is what `bench_embed --queries N --dump FILE` writes: the questions and the
vectors sediment gave them. Each question is embedded alone, as a query is, and the script prints
p50 and p99 of that and the worst cosine between its vectors and sediment's. It is the model as
sentence-transformers runs it (BERT, mean pooling over the mask, L2 normalisation), written
plainly, so it also checks sediment's vectors.
"""

import json
import os
import statistics
import sys
import time

import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer


def layer_norm(x, w, b, eps=1e-12):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def gelu(x):
    # BERT's exact gelu, 0.5 x (1 + erf(x / sqrt 2)); numpy has no erf, so Abramowitz-Stegun
    # 7.1.26 (error below 1.5e-7), far under the 1e-4 cosine being checked.
    z = x / np.sqrt(2.0)
    s = np.sign(z)
    a = np.abs(z)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    erf = s * (1.0 - poly * np.exp(-a * a))
    return 0.5 * x * (1.0 + erf)


class MiniLM:
    def __init__(self, model_dir):
        config = json.load(open(os.path.join(model_dir, "config.json")))
        self.heads = config["num_attention_heads"]
        self.layers = config["num_hidden_layers"]
        w = load_file(os.path.join(model_dir, "model.safetensors"))
        self.w = {k: np.ascontiguousarray(v) for k, v in w.items()}
        # Linear weights are (out, in); keep them transposed once, as x @ W.T every call would
        # copy.
        for k in list(self.w):
            if k.endswith("dense.weight") or k.endswith(("query.weight", "key.weight", "value.weight")):
                self.w[k] = np.ascontiguousarray(self.w[k].T)
        self.tokenizer = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(256)

    def embed(self, text):
        w = self.w
        enc = self.tokenizer.encode(text)
        ids = np.array(enc.ids)
        n = len(ids)
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:n]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        d = x.shape[1]
        hd = d // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q = x @ w[p + "attention.self.query.weight"] + w[p + "attention.self.query.bias"]
            k = x @ w[p + "attention.self.key.weight"] + w[p + "attention.self.key.bias"]
            v = x @ w[p + "attention.self.value.weight"] + w[p + "attention.self.value.bias"]
            q = q.reshape(n, self.heads, hd).transpose(1, 0, 2)
            k = k.reshape(n, self.heads, hd).transpose(1, 2, 0)
            v = v.reshape(n, self.heads, hd).transpose(1, 0, 2)
            s = (q @ k) / np.sqrt(hd)
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            a = (s @ v).transpose(1, 0, 2).reshape(n, d)
            a = a @ w[p + "attention.output.dense.weight"] + w[p + "attention.output.dense.bias"]
            x = layer_norm(a + x, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"])
            h = gelu(x @ w[p + "intermediate.dense.weight"] + w[p + "intermediate.dense.bias"])
            h = h @ w[p + "output.dense.weight"] + w[p + "output.dense.bias"]
            x = layer_norm(h + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"])
        mean = x.mean(0)
        return mean / max(np.linalg.norm(mean), 1e-12)


def main():
    questions = json.load(open(sys.argv[1]))
    model_dir = sys.argv[2] if len(sys.argv) > 2 else os.path.expanduser("~/.cache/sediment/models/all-MiniLM-L6-v2")
    model = MiniLM(model_dir)
    for q in questions[:8]:
        model.embed(q["text"])
    times = []
    worst = 1.0
    for q in questions:
        start = time.perf_counter()
        v = model.embed(q["text"])
        times.append((time.perf_counter() - start) * 1e3)
        worst = min(worst, float(np.dot(v, np.array(q["vector"], dtype=np.float32))))
    times.sort()
    p99 = times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))]
    print(
        f"numpy reference ({os.environ.get('OPENBLAS_NUM_THREADS', 'default')} BLAS threads): "
        f"{len(times)} queries, p50 {statistics.median(times):.2f} ms, p99 {p99:.2f} ms; "
        f"worst cosine to sediment's vectors {worst:.6f}"
    )


if __name__ == "__main__":
    main()
