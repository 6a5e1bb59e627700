// MappedFile and atomic writes on real files.
#include "core/mapped_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "tests/test_util.h"

namespace laminar {
namespace {

TEST(MappedFileTest, MapsAndReports) {
  auto dir = testing::TempDir("mapped_file");
  std::string path = (dir / "a.bin").string();
  ASSERT_TRUE(WriteFileAtomic(path, "hello").ok());
  auto f = MappedFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*f)->data()), 5), "hello");
  EXPECT_EQ(*ReadFileToString(path), "hello");
  ASSERT_TRUE(WriteFileAtomic(path, "").ok());
  auto empty = MappedFile::Open(path);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ((*empty)->size(), 0u);
}

TEST(MappedFileTest, ErrorsNameThePath) {
  auto missing = MappedFile::Open("/nonexistent/x.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/x.gguf"), std::string::npos);
  auto dir = MappedFile::Open("/tmp");
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  // A FIFO with no writer must not block.
  auto fifo = (testing::TempDir("fifo") / "pipe").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(MappedFile::Open(fifo).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadFileToString(fifo).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace laminar
