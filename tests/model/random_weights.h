// Random weights for every tensor a ModelConfig implies (Hugging Face names), for tests that need
// a small model without a file.
#pragma once

#include <random>

#include "model/hf_checkpoint.h"
#include "model/weight_store.h"

namespace laminar::testing {

// A tiny valid Llama config (GQA 4/2 heads of 4 dims, 2 layers) for tests to adjust.
inline model::ModelConfig TinyLlamaConfig() {
  model::ModelConfig c;
  c.architecture = "llama";
  c.vocab_size = 32;
  c.hidden_size = 16;
  c.intermediate_size = 24;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 4;
  c.max_position_embeddings = 64;
  return c;
}

// f32 normal(0, stddev) values, the same for the same seed.
inline model::WeightStore RandomWeights(const model::ModelConfig& config, uint32_t seed,
                                        float stddev = 0.5f) {
  model::WeightStore store;
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.f, stddev);
  for (const auto& [name, shape] : model::ExpectedHfTensors(config)) {
    Tensor t(DType::kF32, shape);
    for (int64_t i = 0; i < t.num_elements(); ++i) t.data_as<float>()[i] = dist(rng);
    store.Put(name, std::move(t));
  }
  return store;
}

}  // namespace laminar::testing
