#!/usr/bin/env python3
"""Writes small seed inputs for the fuzz targets in tests/fuzz (rerunnable; no dependencies).

  make_fuzz_seeds.py OUT_DIR   ->  OUT_DIR/gguf/*.gguf, OUT_DIR/llama2c/*.bin and the tokenizer
                                   files: OUT_DIR/gguf_tokenizer/*.gguf (vocabulary only),
                                   OUT_DIR/llama2c_tokenizer/*.bin, OUT_DIR/encoder_json/* (encoder.json,
                                   a NUL byte, vocab.bpe: what encoder_json_fuzz splits)

Formats: GGUF v3 (ggml docs/gguf.md), llama2.c's legacy and version-1 checkpoints and its
tokenizer.bin (karpathy/llama2.c run.c and export.py), GPT-2's encoder.json and vocab.bpe. Tensor contents are arbitrary bytes of the right size.
"""
import os
import struct
import sys

# ggml type id -> (elements per block, bytes per block)
GGML = {"f32": (0, 1, 4), "f16": (1, 1, 2), "q4_0": (2, 32, 18), "q4_1": (3, 32, 20),
        "q8_0": (8, 32, 34), "q4_K": (12, 256, 144), "q6_K": (14, 256, 210), "bf16": (30, 1, 2)}


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


def gguf(kvs, tensors, alignment=32):
    """kvs: list of (key, type_id, encoded value); tensors: list of (name, ne, type name)."""
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs))
    for key, type_id, value in kvs:
        out += gguf_str(key) + struct.pack("<I", type_id) + value
    data, offset = b"", 0
    for name, ne, tname in tensors:
        type_id, blk, bsz = GGML[tname]
        n = 1
        for d in ne:
            n *= d
        size = n // blk * bsz
        out += gguf_str(name) + struct.pack("<I", len(ne))
        out += b"".join(struct.pack("<Q", d) for d in ne)
        out += struct.pack("<IQ", type_id, offset)
        # Small, valid-looking values: f16 0x3c00 (1.0) repeated keeps block scales finite.
        data += (b"\x00\x3c" * (size // 2 + 1))[:size]
        pad = (-len(data)) % alignment
        data += b"\0" * pad
        offset = len(data)
    out += b"\0" * ((-len(out)) % alignment)
    return out + data


def u32(k, v):
    return (k, 4, struct.pack("<I", v))


def f32(k, v):
    return (k, 6, struct.pack("<f", v))


def string(k, v):
    return (k, 8, gguf_str(v))


def arr(k, elem_type, fmt, values):
    return (k, 9, struct.pack("<IQ", elem_type, len(values)) +
            b"".join(struct.pack("<" + fmt, v) for v in values))


def str_arr(k, values):
    return (k, 9, struct.pack("<IQ", 8, len(values)) + b"".join(gguf_str(v) for v in values))


def tiny_llama():
    c, f, v = 32, 32, 4
    kvs = [string("general.architecture", "llama"), u32("llama.context_length", 64),
           u32("llama.embedding_length", c), u32("llama.block_count", 1),
           u32("llama.feed_forward_length", f), u32("llama.attention.head_count", 2),
           u32("llama.attention.head_count_kv", 1), f32("llama.rope.freq_base", 10000.0),
           f32("llama.attention.layer_norm_rms_epsilon", 1e-5),
           str_arr("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>", "a"]),
           arr("tokenizer.ggml.scores", 6, "f", [0.0, 0.0, 0.0, -1.0]),
           arr("tokenizer.ggml.token_type", 5, "i", [2, 3, 3, 1]),
           u32("tokenizer.ggml.bos_token_id", 1), u32("tokenizer.ggml.eos_token_id", 2)]
    tensors = [("token_embd.weight", [c, v], "f16"), ("output_norm.weight", [c], "f32"),
               ("output.weight", [c, v], "q8_0"), ("blk.0.attn_norm.weight", [c], "f32"),
               ("blk.0.attn_q.weight", [c, c], "q8_0"), ("blk.0.attn_k.weight", [c, 16], "f32"),
               ("blk.0.attn_v.weight", [c, 16], "f16"), ("blk.0.attn_output.weight", [c, c], "q4_0"),
               ("blk.0.ffn_norm.weight", [c], "f32"), ("blk.0.ffn_gate.weight", [c, f], "q4_1"),
               ("blk.0.ffn_up.weight", [c, f], "bf16"), ("blk.0.ffn_down.weight", [f, c], "q8_0")]
    return gguf(kvs, tensors)


def every_value_type():
    kvs = [(f"u8", 0, b"\x07"), ("i8", 1, b"\xf9"), ("u16", 2, b"\x01\x02"), ("i16", 3, b"\xff\xff"),
           u32("general.alignment", 64), ("i32", 5, struct.pack("<i", -5)), f32("f32", 0.5),
           ("bool", 7, b"\x01"), string("str", "hello"), ("u64", 10, struct.pack("<Q", 2**63)),
           ("i64", 11, struct.pack("<q", -1)), ("f64", 12, struct.pack("<d", 0.25)),
           (("nested", 9, struct.pack("<IQ", 9, 2) + struct.pack("<IQ", 0, 2) + b"\x01\x02" +
             struct.pack("<IQ", 8, 1) + gguf_str("x"))),
           arr("bools", 7, "B", [0, 1, 1]), str_arr("merges", ["a b", "ab c"])]
    tensors = [("k4", [256, 2], "q4_K"), ("k6", [256], "q6_K")]
    return gguf(kvs, tensors, alignment=64)


def llama2c(version):
    dim, hidden, layers, heads, kv_heads, vocab, seq = 8, 12, 1, 2, 1, 5, 4
    head = dim // heads
    kv = kv_heads * head
    floats = (2 * dim + dim * dim * 2 + dim * kv * 2 + 3 * dim * hidden) * layers + vocab * dim + dim
    params = struct.pack("<7i", dim, hidden, layers, heads, kv_heads, vocab, seq)
    if version == 0:
        floats += seq * head
        header = params
    else:
        header = struct.pack("<Ii", 0x616B3432, 1) + params + b"\x01"
        header += b"\0" * (256 - len(header))
    return header + struct.pack(f"<{floats}f", *[0.01 * i for i in range(floats)])


def spm_vocab_gguf():
    """tokenizer.ggml.model "llama": SentencePiece pieces with scores, types and byte fallback."""
    pieces = ["<unk>", "<s>", "</s>", "<0x0A>", "<0xE6>", "\u2581", "\u2581a", "a", "b", "ab",
              "\u2581ab"]
    types = [2, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1]
    kvs = [string("general.architecture", "llama"), string("tokenizer.ggml.model", "llama"),
           str_arr("tokenizer.ggml.tokens", pieces),
           arr("tokenizer.ggml.scores", 6, "f", [0.0] * 5 + [-1.0 * i for i in range(6)]),
           arr("tokenizer.ggml.token_type", 5, "i", types),
           u32("tokenizer.ggml.bos_token_id", 1), u32("tokenizer.ggml.eos_token_id", 2),
           u32("tokenizer.ggml.unknown_token_id", 0)]
    return gguf(kvs, [])


def bpe_vocab_gguf(pre):
    """tokenizer.ggml.model "gpt2": byte-level pieces, merges and a pre-tokenizer name."""
    pieces = ["a", "b", "c", "\u0120", "ab", "\u0120a", "\u0120ab", "1", "<|endoftext|>"]
    types = [1] * 8 + [3]
    kvs = [string("general.architecture", "gpt2"), string("tokenizer.ggml.model", "gpt2"),
           string("tokenizer.ggml.pre", pre), str_arr("tokenizer.ggml.tokens", pieces),
           arr("tokenizer.ggml.token_type", 5, "i", types),
           str_arr("tokenizer.ggml.merges", ["a b", "\u0120 a", "\u0120a b"]),
           u32("tokenizer.ggml.bos_token_id", 8), u32("tokenizer.ggml.eos_token_id", 8)]
    return gguf(kvs, [])


def llama2c_tokenizer():
    """llama2.c tokenizer.bin: u32 max token length, then per token f32 score, i32 length, bytes."""
    pieces = [b"<unk>", b"\n<s>\n", b"\n</s>\n", b"<0x0A>", b" a", b"a", b"b", b" ab", b"ab"]
    out = struct.pack("<I", max(len(p) for p in pieces))
    for i, p in enumerate(pieces):
        out += struct.pack("<fi", -float(i), len(p)) + p
    return out


def encoder_json():
    """GPT-2's pair: encoder.json (piece -> id, <|endoftext|> last), NUL, vocab.bpe."""
    pieces = ["a", "b", "c", "\u0120", "ab", "\u0120a", "\u0120ab", "1", "<|endoftext|>"]
    encoder = "{" + ", ".join(f'"{p}": {i}' for i, p in enumerate(pieces)) + "}"
    merges = "#version: 0.2\na b\n\u0120 a\n\u0120a b\n"
    return encoder.encode() + b"\0" + merges.encode()


def main():
    out = sys.argv[1]
    seeds = {"gguf/tiny_llama.gguf": tiny_llama(), "gguf/every_value_type.gguf": every_value_type(),
             "llama2c/legacy.bin": llama2c(0), "llama2c/v1.bin": llama2c(1),
             "gguf_tokenizer/spm.gguf": spm_vocab_gguf(),
             "gguf_tokenizer/gpt2.gguf": bpe_vocab_gguf("gpt2"),
             "gguf_tokenizer/qwen2.gguf": bpe_vocab_gguf("qwen2"),
             "llama2c_tokenizer/tokenizer.bin": llama2c_tokenizer(),
             "encoder_json/gpt2": encoder_json(),
             # delta_fuzz: coding, stride, step exponent, then (offset, offset, value) edits.
             "delta/exact": bytes([0, 0, 10]), "delta/int8": bytes([1, 3, 12]),
             "delta/int4_edited": bytes([2, 1, 8, 60, 0, 7, 200, 0, 0]),
             "delta/cut": bytes([0, 5, 4, 90, 0])}
    for name, data in seeds.items():
        os.makedirs(os.path.join(out, os.path.dirname(name)), exist_ok=True)
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
