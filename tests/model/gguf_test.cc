// GGUF reader tests: real files from ../shared/data, hand-built files, and corrupted inputs.
#include "model/gguf.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace laminar::model {
namespace {

TEST(GgufTest, ParsesStories260K) {
  LAMINAR_SHARED_OR_SKIP(path, "models/stories260K/stories260K.gguf");
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->GetString("general.architecture").value(), "llama");
  EXPECT_EQ(f->GetInt("llama.embedding_length").value(), 64);
  EXPECT_EQ(f->GetStringArray("tokenizer.ggml.tokens")->size(), 512u);
  EXPECT_EQ(f->tensors().size(), 3u + 5u * 9u);
}

}  // namespace
}  // namespace laminar::model
