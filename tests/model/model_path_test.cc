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
  auto empty = testing::TempDir("model_path_empty");
  setenv("LAMINAR_MODEL_CACHE", empty.c_str(), 1);
  auto missing = ResolveModelPath("smollm2-135m-instruct");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("scripts/setup.sh"), std::string::npos);
  unsetenv("LAMINAR_MODEL_CACHE");
  auto unknown = ResolveModelPath("no-such-model");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("smollm2-135m-instruct"), std::string::npos);
}

}  // namespace
}  // namespace laminar::model
