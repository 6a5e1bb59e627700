// Model name resolution.
#include "model/model_path.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "core/mapped_file.h"
#include "tests/test_util.h"

namespace laminar::model {
namespace {

TEST(ModelPathTest, ResolvesPathsAndNames) {
  auto dir = testing::TempDir("model_path");
  std::string file = (dir / "SmolLM2-135M-Instruct.Q4_1.gguf").string();
  ASSERT_TRUE(WriteFileAtomic(file, "GGUF").ok());
  EXPECT_EQ(*ResolveModelPath(file), file);
  setenv("LAMINAR_MODEL_CACHE", dir.c_str(), 1);
  EXPECT_EQ(*ResolveModelPath("smollm2-135m-instruct"), file);
  EXPECT_EQ(*ResolveModelPath("SmolLM2-135M-Instruct"), file);  // a name in any case
  auto empty = testing::TempDir("model_path_empty");
  setenv("LAMINAR_MODEL_CACHE", empty.c_str(), 1);
  auto missing = ResolveModelPath("smollm2-135m-instruct");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("scripts/setup.sh"), std::string::npos);
  unsetenv("LAMINAR_MODEL_CACHE");
  auto unknown = ResolveModelPath("no-such-model");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("smollm2-135m-instruct"), std::string::npos);

  // "~/" is the home folder, as in a shell.
  const char* old_home = std::getenv("HOME");
  const std::string saved_home = old_home ? old_home : "";
  setenv("HOME", dir.c_str(), 1);
  EXPECT_EQ(*ResolveModelPath("~/SmolLM2-135M-Instruct.Q4_1.gguf"), file);
  auto no_file = ResolveModelPath("~/nothing.gguf");
  ASSERT_FALSE(no_file.ok());
  EXPECT_NE(no_file.status().message().find((dir / "nothing.gguf").string()), std::string::npos);
  setenv("HOME", saved_home.c_str(), 1);
}

}  // namespace
}  // namespace laminar::model

#include "model/model_config.h"
#include "tests/model/random_weights.h"

namespace laminar::model {
namespace {

TEST(ModelConfigTest, AbsurdSizesAreRefusedByName) {
  ModelConfig c = testing::TinyLlamaConfig();
  ASSERT_TRUE(c.Validate("cfg").ok());
  ModelConfig huge = c;
  huge.num_hidden_layers = int64_t{1} << 62;
  auto st = huge.Validate("x/config.json");
  EXPECT_NE(st.message().find("num_hidden_layers"), std::string::npos) << st;
  EXPECT_NE(st.message().find("x/config.json"), std::string::npos) << st;
  huge = c;
  huge.head_dim = int64_t{1} << 62;
  EXPECT_FALSE(huge.Validate("cfg").ok());
  huge = c;
  huge.num_key_value_heads = 8;
  EXPECT_FALSE(huge.Validate("cfg").ok());
}

}  // namespace
}  // namespace laminar::model
