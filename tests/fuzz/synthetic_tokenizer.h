// The tokenizer fuzz targets share: the project's own byte-level BPE tokenizer of the synthetic
// "tiny-llama" model (learned from the shipped corpus), built once per fuzzing process.
#pragma once

#include <memory>

#include "model/synthetic/synthetic_model.h"
#include "model/tokenizer/tokenizer.h"

namespace laminar::fuzz {

inline const model::Tokenizer& SyntheticTokenizer() {
  static const std::unique_ptr<model::Tokenizer> tokenizer = [] {
    auto m = model::MakeSyntheticModel(*model::FindSyntheticPreset("tiny-llama"), 1);
    if (!m.ok()) __builtin_trap();
    auto tok = model::SyntheticTokenizer(*m);
    if (!tok.ok()) __builtin_trap();
    return std::move(*tok);
  }();
  return *tokenizer;
}

}  // namespace laminar::fuzz
