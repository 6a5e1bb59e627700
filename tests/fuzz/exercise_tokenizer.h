// What every tokenizer-file fuzz target does with a tokenizer that loaded: encode a few texts
// (with and without special tokens), check that every id is in the vocabulary, and decode them
// back, whole and streamed. A loader that accepts a file must give a tokenizer that does not
// crash, read out of bounds or emit an id it cannot decode.
#pragma once

#include <cstdint>
#include <string>

#include "model/tokenizer/tokenizer.h"

namespace laminar::fuzz {

inline void ExerciseTokenizer(const model::Tokenizer& tok) {
  for (const char* text : {"", "Hello world", "  12  34\n\tcode()", "日本語 🦙", "<|im_end|>",
                           "<s>a</s>", "\xff\xfe broken \xc3"}) {
    for (const bool special : {false, true}) {
      auto ids = tok.Encode(text, {.add_special = special, .parse_special = special});
      if (!ids.ok()) continue;
      for (int32_t id : *ids) {
        if (id < 0 || id >= tok.vocab_size()) __builtin_trap();
      }
      tok.Decode(*ids, /*skip_special=*/false).status().IgnoreError();
      tok.Decode(*ids, /*skip_special=*/true).status().IgnoreError();
      model::StreamingDecoder stream = tok.NewStreamingDecoder(/*skip_special=*/false);
      for (int32_t id : *ids) stream.Next(id).status().IgnoreError();
      (void)stream.Finish();
    }
  }
}

}  // namespace laminar::fuzz
